"""The write pass of an import for tasks and responses on PostgreSQL, where most of a large file's
rows are: each batch goes by COPY into a temporary staging table, and a few set-wise statements
check it, count what it would create, update or leave unchanged, and upsert it. The ORM path of
labeling/imports.py (SQLite, and every other record type) does the same one row object at a time.

Upserts skip rows that would not change (`WHERE ... IS DISTINCT FROM ...`), so re-importing a file
rewrites nothing. Staging tables are created inside the import's transaction and dropped at its
end; a rollback drops them too. COPY's text format escapes tabs, newlines and backslashes itself;
NUL, which PostgreSQL text cannot hold, never gets here (records.record_parse refuses the line).
Records become staging rows once, when the file is scanned, and are spooled as such, so the write
pass parses nothing again.
"""

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from django.db import connection

from labeling.models import Document, Response, Task
from labeling.records import ResponseRecord, TaskRecord


class Tally(NamedTuple):
    created: int
    updated: int
    unchanged: int


class ResponseProblem(NamedTuple):
    """A staged response that cannot be written: its task is neither in the file nor held
    (`task_missing`), or the project holds the response under another task."""

    line: int
    response: str
    task: str
    task_missing: bool


TASK = Task._meta.db_table
DOCUMENT = Document._meta.db_table
RESPONSE = Response._meta.db_table
TASK_STAGE = "import_task_stage"
RESPONSE_STAGE = "import_response_stage"

# Staged documents are one JSON array per task, [[id, title, text], ...] in the record's order,
# the shape in which held documents are aggregated to compare them.
_STAGES = {
    TASK_STAGE: (
        "line integer, external_id text, domain text, prompt text, instructions text, "
        "metadata jsonb, split text, documents jsonb"
    ),
    RESPONSE_STAGE: (
        "line integer, external_id text, task text, content text, messages jsonb, "
        "source_model text, metadata jsonb"
    ),
}

_TASK_TALLY = f"""
SELECT count(*) FILTER (WHERE t.id IS NULL),
       count(*) FILTER (WHERE t.id IS NOT NULL AND (
           (t.domain, t.prompt, t.instructions, t.metadata, t.split)
               IS DISTINCT FROM (s.domain, s.prompt, s.instructions, s.metadata,
                                 coalesce(s.split, t.split))
           OR s.documents IS DISTINCT FROM coalesce((
               SELECT jsonb_agg(jsonb_build_array(d.external_id, d.title, d.text)
                                ORDER BY d.position)
               FROM {DOCUMENT} d WHERE d.task_id = t.id), '[]'::jsonb)
       ))
FROM {TASK_STAGE} s
LEFT JOIN {TASK} t ON t.project_id = %(project)s AND t.external_id = s.external_id
"""

# A record without a split keeps the split already assigned in the app: two statements, one
# for the records that give a split and one, which leaves the column alone, for the others.
_TASK_UPSERT = """
INSERT INTO {task} AS t (project_id, external_id, domain, prompt, instructions, metadata, split)
SELECT %(project)s, external_id, domain, prompt, instructions, metadata,
       coalesce(split, 'unassigned')
FROM {stage} WHERE split IS {given}
ON CONFLICT (project_id, external_id) DO UPDATE SET {assignments}
WHERE ({held}) IS DISTINCT FROM ({wanted})
"""

_DOCUMENTS_STALE = f"""
DELETE FROM {DOCUMENT} d USING {TASK} t, {TASK_STAGE} s
WHERE t.project_id = %(project)s AND t.external_id = s.external_id AND d.task_id = t.id
  AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(s.documents) e
                  WHERE e.value ->> 0 = d.external_id)
"""

_DOCUMENTS_UPSERT = f"""
INSERT INTO {DOCUMENT} AS d (task_id, external_id, title, text, position)
SELECT t.id, e.value ->> 0, e.value ->> 1, e.value ->> 2, e.position - 1
FROM {TASK_STAGE} s
JOIN {TASK} t ON t.project_id = %(project)s AND t.external_id = s.external_id
CROSS JOIN LATERAL jsonb_array_elements(s.documents) WITH ORDINALITY AS e(value, position)
ON CONFLICT (task_id, external_id) DO UPDATE
SET title = excluded.title, text = excluded.text, position = excluded.position
WHERE (d.title, d.text, d.position) IS DISTINCT FROM (excluded.title, excluded.text,
                                                     excluded.position)
"""

_RESPONSE_PROBLEMS = f"""
SELECT s.line, s.external_id, s.task, t.id IS NULL
FROM {RESPONSE_STAGE} s
LEFT JOIN {TASK} t ON t.project_id = %(project)s AND t.external_id = s.task
LEFT JOIN {RESPONSE} r ON r.project_id = %(project)s AND r.external_id = s.external_id
WHERE t.id IS NULL OR r.task_id <> t.id
ORDER BY s.line
"""

# xmax is 0 on a row version that an INSERT made, and set on one that ON CONFLICT updated.
_RESPONSE_UPSERT = f"""
WITH written AS (
    INSERT INTO {RESPONSE} AS r
        (project_id, task_id, external_id, content, messages, source_model, metadata)
    SELECT %(project)s, t.id, s.external_id, s.content, s.messages, s.source_model, s.metadata
    FROM {RESPONSE_STAGE} s
    JOIN {TASK} t ON t.project_id = %(project)s AND t.external_id = s.task
    ON CONFLICT (project_id, external_id) DO UPDATE
    SET content = excluded.content, messages = excluded.messages,
        source_model = excluded.source_model, metadata = excluded.metadata
    WHERE r.task_id = excluded.task_id
      AND (r.content, r.messages, r.source_model, r.metadata)
          IS DISTINCT FROM (excluded.content, excluded.messages, excluded.source_model,
                            excluded.metadata)
    RETURNING xmax = 0 AS created
)
SELECT count(*) FILTER (WHERE created), count(*) FILTER (WHERE NOT created) FROM written
"""


def _task_upsert(given: bool) -> str:
    fields = ["domain", "prompt", "instructions", "metadata", *(["split"] if given else [])]
    return _TASK_UPSERT.format(
        task=TASK,
        stage=TASK_STAGE,
        given="NOT NULL" if given else "NULL",
        assignments=", ".join(f"{name} = excluded.{name}" for name in fields),
        held=", ".join(f"t.{name}" for name in fields),
        wanted=", ".join(f"excluded.{name}" for name in fields),
    )


_TASK_UPSERTS = (_task_upsert(given=True), _task_upsert(given=False))


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _copy_field(value: str | None) -> str:
    """A value as a field of COPY's text format: NULL is \\N, and a backslash, tab, newline
    or carriage return inside a value is escaped with a backslash."""
    if value is None:
        return "\\N"
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def _task_fields(r: TaskRecord) -> tuple[str | None, ...]:
    documents = [[d.id, d.title, d.text] for d in r.documents]
    return (r.id, r.domain, r.prompt, r.instructions, _json(r.metadata), r.split, _json(documents))


def _response_fields(r: ResponseRecord) -> tuple[str | None, ...]:
    messages = None if r.messages is None else [m.model_dump(exclude_none=True) for m in r.messages]
    return (r.id, r.task, r.content or "", _json(messages), r.source, _json(r.metadata))


_FIELDS: dict[str, Callable[[Any], tuple[str | None, ...]]] = {
    "task": _task_fields,
    "response": _response_fields,
}
STAGED_KINDS = frozenset(_FIELDS)


class StagedWriter:
    """Stages and writes batches of task and response rows of one project. `row` turns a record
    into its staging row when the file is scanned; the write methods take lists of such rows
    and run inside the import's transaction, and `close()` before that ends."""

    def __init__(self, project_id: int) -> None:
        self.params = {"project": project_id}
        self.staged: set[str] = set()

    @staticmethod
    def row(line: int, record: Any) -> bytes:
        """The record (a task or a response) as its line of COPY text, line number first."""
        fields = "\t".join(_copy_field(value) for value in _FIELDS[record.type](record))
        return f"{line}\t{fields}\n".encode()

    def _stage(self, table: str, rows: list[bytes]) -> Any:
        """COPY `rows` into `table` (emptied first); return the cursor, to run the rest on."""
        cursor = connection.cursor()
        if table in self.staged:
            cursor.execute(f"TRUNCATE {table}")
        else:
            cursor.execute(f"CREATE TEMPORARY TABLE {table} ({_STAGES[table]}) ON COMMIT DROP")
            self.staged.add(table)
        with cursor.copy(f"COPY {table} FROM STDIN") as copy:
            copy.write(b"".join(rows))
        return cursor

    def tasks(self, rows: list[bytes]) -> Tally:
        with self._stage(TASK_STAGE, rows) as cursor:
            cursor.execute(_TASK_TALLY, self.params)
            created, updated = cursor.fetchone()
            for statement in (*_TASK_UPSERTS, _DOCUMENTS_STALE, _DOCUMENTS_UPSERT):
                cursor.execute(statement, self.params)
        return Tally(created, updated, len(rows) - created - updated)

    def responses(self, rows: list[bytes]) -> tuple[Tally, list[ResponseProblem]]:
        """The tally of the responses written, and the problems of those that were not."""
        with self._stage(RESPONSE_STAGE, rows) as cursor:
            cursor.execute(_RESPONSE_PROBLEMS, self.params)
            problems = [ResponseProblem(*row) for row in cursor.fetchall()]
            cursor.execute(_RESPONSE_UPSERT, self.params)
            created, updated = cursor.fetchone()
        return Tally(created, updated, len(rows) - len(problems) - created - updated), problems

    def close(self) -> None:
        """Drop the staging tables now (in tests the transaction outlives the import)."""
        if self.staged:
            with connection.cursor() as cursor:
                cursor.execute(f"DROP TABLE {', '.join(sorted(self.staged))}")
            self.staged.clear()
