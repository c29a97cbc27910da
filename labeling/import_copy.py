"""The write pass of an import for tasks and responses on PostgreSQL, where most of a large file's
rows are: each kind goes by one COPY into a temporary staging table, and a few set-wise statements
check it, count what it would create, update or leave unchanged, and upsert it. The ORM path of
labeling/imports.py (SQLite, and every other record type) does the same a batch of row objects at
a time.

A staged row is the line number and the validated record as JSON (jsonb), serialized once when
the file is scanned and spooled as such, so the write pass parses nothing again; the statements
read the fields out of it. `exclude_none` leaves unset optional fields out (a NULL when read) and
writes messages as the ORM path does. COPY's text format needs only the backslash escaped here:
the JSON serializer escapes tabs, newlines and carriage returns itself. NUL, which PostgreSQL
cannot store, never gets here (records.record_parse refuses the line).

Upserts skip rows that would not change (`WHERE ... IS DISTINCT FROM ...`), so re-importing a file
rewrites nothing. Staging tables are created inside the import's transaction and dropped at its
end; a rollback drops them too.
"""

from collections.abc import Iterable
from typing import Any, NamedTuple

from django.db import connection

from labeling.models import Document, Response, Task

STAGED_KINDS = frozenset({"task", "response"})


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

_TASKS = f"""(
    SELECT doc ->> 'id' AS external_id, doc ->> 'domain' AS domain, doc ->> 'prompt' AS prompt,
           doc ->> 'instructions' AS instructions, doc -> 'metadata' AS metadata,
           doc ->> 'split' AS split, doc -> 'documents' AS documents
    FROM {TASK_STAGE})"""

_RESPONSES = f"""(
    SELECT line, doc ->> 'id' AS external_id, doc ->> 'task' AS task,
           coalesce(doc ->> 'content', '') AS content, doc -> 'messages' AS messages,
           doc ->> 'source' AS source_model, doc -> 'metadata' AS metadata
    FROM {RESPONSE_STAGE})"""

# A staged task's documents are the record's [{id, title, text}, ...] in order: held ones are
# aggregated in that shape to compare them.
_TASK_TALLY = f"""
SELECT count(*) FILTER (WHERE t.id IS NULL),
       count(*) FILTER (WHERE t.id IS NOT NULL AND (
           (t.domain, t.prompt, t.instructions, t.metadata, t.split)
               IS DISTINCT FROM (s.domain, s.prompt, s.instructions, s.metadata,
                                 coalesce(s.split, t.split))
           OR s.documents IS DISTINCT FROM coalesce((
               SELECT jsonb_agg(jsonb_build_object('id', d.external_id, 'title', d.title,
                                                   'text', d.text) ORDER BY d.position)
               FROM {DOCUMENT} d WHERE d.task_id = t.id), '[]'::jsonb)
       ))
FROM {_TASKS} s
LEFT JOIN {TASK} t ON t.project_id = %(project)s AND t.external_id = s.external_id
"""

# A record without a split keeps the split already assigned in the app: two statements, one
# for the records that give a split and one, which leaves the column alone, for the others.
_TASK_UPSERT = """
INSERT INTO {task} AS t (project_id, external_id, domain, prompt, instructions, metadata, split)
SELECT %(project)s, external_id, domain, prompt, instructions, metadata,
       coalesce(split, 'unassigned')
FROM {tasks} s WHERE split IS {given}
ON CONFLICT (project_id, external_id) DO UPDATE SET {assignments}
WHERE ({held}) IS DISTINCT FROM ({wanted})
"""

_DOCUMENTS_STALE = f"""
DELETE FROM {DOCUMENT} d USING {TASK} t, {_TASKS} s
WHERE t.project_id = %(project)s AND t.external_id = s.external_id AND d.task_id = t.id
  AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(s.documents) e
                  WHERE e.value ->> 'id' = d.external_id)
"""

_DOCUMENTS_UPSERT = f"""
INSERT INTO {DOCUMENT} AS d (task_id, external_id, title, text, position)
SELECT t.id, e.value ->> 'id', e.value ->> 'title', e.value ->> 'text', e.position - 1
FROM {_TASKS} s
JOIN {TASK} t ON t.project_id = %(project)s AND t.external_id = s.external_id
CROSS JOIN LATERAL jsonb_array_elements(s.documents) WITH ORDINALITY AS e(value, position)
ON CONFLICT (task_id, external_id) DO UPDATE
SET title = excluded.title, text = excluded.text, position = excluded.position
WHERE (d.title, d.text, d.position) IS DISTINCT FROM (excluded.title, excluded.text,
                                                     excluded.position)
"""

_RESPONSE_PROBLEMS = f"""
SELECT s.line, s.external_id, s.task, t.id IS NULL
FROM {_RESPONSES} s
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
    FROM {_RESPONSES} s
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
        tasks=_TASKS,
        given="NOT NULL" if given else "NULL",
        assignments=", ".join(f"{name} = excluded.{name}" for name in fields),
        held=", ".join(f"t.{name}" for name in fields),
        wanted=", ".join(f"excluded.{name}" for name in fields),
    )


_TASK_UPSERTS = (_task_upsert(given=True), _task_upsert(given=False))


def staged_row(line: int, record: Any) -> bytes:
    """A task or response record as its line of COPY text: the line number, a tab, the JSON."""
    document: bytes = record.__pydantic_serializer__.to_json(record, exclude_none=True)
    return b"%d\t%s\n" % (line, document.replace(b"\\", b"\\\\"))


class StagedWriter:
    """Writes the task and response rows (of `staged_row`) of one project, inside the import's
    transaction; `close()` before that ends."""

    def __init__(self, project_id: int) -> None:
        self.params = {"project": project_id}
        self.staged: list[str] = []

    def _stage(self, table: str, chunks: Iterable[list[bytes]]) -> tuple[Any, int]:
        """COPY the rows into a new staging table; return the cursor (to run the rest on) and
        how many rows there were."""
        cursor = connection.cursor()
        if not self.staged:
            # The planner has no statistics of a staging table and guesses costs high enough
            # for JIT compilation, which cost the task tally alone 0.3 to 0.6 s of CPU on the
            # bench's 10,000 tasks (0.02 to 0.07 s without) and speeds nothing up here. For
            # the rest of the transaction, so the ORM statements after it go without too.
            cursor.execute("SET LOCAL jit = off")
        cursor.execute(f"CREATE TEMPORARY TABLE {table} (line integer, doc jsonb) ON COMMIT DROP")
        self.staged.append(table)
        rows = 0
        with cursor.copy(f"COPY {table} FROM STDIN") as copy:
            for chunk in chunks:
                copy.write(b"".join(chunk))
                rows += len(chunk)
        return cursor, rows

    def tasks(self, chunks: Iterable[list[bytes]]) -> Tally:
        cursor, rows = self._stage(TASK_STAGE, chunks)
        with cursor:
            cursor.execute(_TASK_TALLY, self.params)
            created, updated = cursor.fetchone()
            for statement in (*_TASK_UPSERTS, _DOCUMENTS_STALE, _DOCUMENTS_UPSERT):
                cursor.execute(statement, self.params)
        return Tally(created, updated, rows - created - updated)

    def responses(self, chunks: Iterable[list[bytes]]) -> tuple[Tally, list[ResponseProblem]]:
        """The tally of the responses written, and the problems of those that were not."""
        cursor, rows = self._stage(RESPONSE_STAGE, chunks)
        with cursor:
            cursor.execute(_RESPONSE_PROBLEMS, self.params)
            problems = [ResponseProblem(*row) for row in cursor.fetchall()]
            cursor.execute(_RESPONSE_UPSERT, self.params)
            created, updated = cursor.fetchone()
        return Tally(created, updated, rows - len(problems) - created - updated), problems

    def close(self) -> None:
        """Drop the staging tables now (in tests the transaction outlives the import)."""
        if self.staged:
            with connection.cursor() as cursor:
                cursor.execute(f"DROP TABLE {', '.join(self.staged)}")
            self.staged.clear()
