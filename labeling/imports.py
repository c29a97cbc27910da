"""Import of JSONL files (FORMATS.md), all or nothing.

Two passes keep memory bounded by the number of distinct record keys, never by the file's text:

1. Scan: parse and validate every line on its own, drop exact repeats, flag conflicting
   duplicates, and spool each record's line to a temporary file per record type.
2. Write: inside one transaction, replay the spools in dependency order (dimensions, tasks,
   responses, rubrics, then labels) in batches. References are resolved against the database,
   which by then holds this file's earlier types too, so records may come in any order. On
   PostgreSQL tasks and responses, most of a large file, are spooled as rows to stage and go by
   one COPY per type, then set-wise statements (labeling/import_copy.py).

Every problem of both passes is collected with its line number and field. If there is any, the
transaction is rolled back and ImportRejected carries the list: nothing is written.
"""

import hashlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import batched
from pathlib import Path
from typing import IO, Any

from django.db import connection, transaction
from django.db.models import Q

from labeling.import_copy import STAGED_KINDS, StagedWriter, Tally, staged_row
from labeling.json_input import json_parse
from labeling.models import (
    Annotator,
    CriterionGrade,
    Dimension,
    Document,
    JudgeScore,
    Preference,
    Project,
    Response,
    Rubric,
    RubricItem,
    Score,
    Synthesis,
    SynthesisCell,
    SynthesisDraw,
    SynthesisVote,
    Task,
)
from labeling.records import (
    RECORD_TYPES,
    CriterionGradeRecord,
    DimensionRecord,
    JudgeScoreRecord,
    PreferenceRecord,
    RecordInvalid,
    ResponseRecord,
    RubricRecord,
    ScoreRecord,
    SynthesisDrawRecord,
    SynthesisRecord,
    TaskRecord,
    record_parse,
)
from labeling.rubric_items import rubric_items_replace, rubric_items_snapshot

BATCH = 1000
MAX_BATCH_BYTES = 64 * 1024 * 1024  # of raw lines per batch, so that big records stay few
MAX_REPORTED_ERRORS = 1000

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class LineError:
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}, {self.field}: {self.message}"


class ImportRejected(Exception):
    """The file has bad lines; `errors` lists up to MAX_REPORTED_ERRORS of them, `total` all."""

    def __init__(self, errors: list[LineError], total: int) -> None:
        if total > len(errors):
            summary = f"{total} problems (showing the first {len(errors)})"
        else:
            lines = len({error.line for error in errors})
            summary = f"{total} problem(s) on {lines} line(s)"
        super().__init__(f"{summary}; nothing was imported")
        self.errors = errors
        self.total = total


def _per_type() -> dict[str, int]:
    return dict.fromkeys(RECORD_TYPES, 0)


@dataclass
class ImportReport:
    """`counts`: the file's records per type (exact repeats once); `created`, `updated` and
    `unchanged` split them by what the import did with each, against what the project held."""

    lines: int = 0
    counts: dict[str, int] = field(default_factory=_per_type)
    created: dict[str, int] = field(default_factory=_per_type)
    updated: dict[str, int] = field(default_factory=_per_type)
    unchanged: dict[str, int] = field(default_factory=_per_type)

    @property
    def changed(self) -> bool:
        return any(self.created.values()) or any(self.updated.values())

    def summary(self) -> str:
        """ "Imported 3 lines: 1 task, 2 responses (2 created, 1 unchanged)." or, when no
        record was created or updated, "Nothing changed: ..."."""
        records = ", ".join(
            _counted(n, kind.replace("_", " ")) for kind, n in self.counts.items() if n
        )
        if not self.changed:
            if not records:
                return "Nothing changed: the file has no records."
            return (
                f"Nothing changed: the project already holds every record of the file ({records})."
            )
        outcomes = ", ".join(
            f"{sum(tally.values())} {name}"
            for name, tally in (
                ("created", self.created),
                ("updated", self.updated),
                ("unchanged", self.unchanged),
            )
            if any(tally.values())
        )
        return f"Imported {_counted(self.lines, 'line')}: {records} ({outcomes})."

    def as_json(self) -> dict[str, Any]:
        """The report as the command's --json, the API and the import job print it: `lines` and
        `counts` as before, plus `changed` and the created/updated/unchanged counts per type."""
        return {
            "lines": self.lines,
            "counts": self.counts,
            "changed": self.changed,
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
        }


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


class _Errors:
    def __init__(self) -> None:
        self.items: list[LineError] = []
        self.total = 0
        # (type, id or name) of records on lines that failed, so a reference to one says so
        # instead of calling it missing.
        self.bad_lines: dict[tuple[str, str], int] = {}

    def add(self, line: int, field_name: str, message: str) -> None:
        self.total += 1
        if len(self.items) < MAX_REPORTED_ERRORS:
            self.items.append(LineError(line, field_name, message))


class _Spool:
    """One temporary file per record type, one line per record: 'line-number TAB raw-json', or
    for the kinds that go by COPY (PostgreSQL), the row to stage as COPY's text format has it
    (import_copy.staged_row)."""

    def __init__(self, folder: str) -> None:
        self.files: dict[str, IO[bytes]] = {
            kind: open(Path(folder) / f"{kind}.jsonl", "w+b")  # noqa: SIM115 (closed in close())
            for kind in RECORD_TYPES
        }

    def write(self, kind: str, row: bytes) -> None:
        self.files[kind].write(row)

    def chunks(self, kind: str, rows: int) -> Iterator[list[bytes]]:
        """The kind's lines, up to `rows` or MAX_BATCH_BYTES of them at a time."""
        handle = self.files[kind]
        handle.flush()
        handle.seek(0)
        chunk: list[bytes] = []
        size = 0
        for row in handle:
            chunk.append(row)
            size += len(row)
            if len(chunk) == rows or size >= MAX_BATCH_BYTES:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()


def _record_named(raw: bytes) -> tuple[str, str] | None:
    """(type, id or name) of a line that failed validation, if it says them."""
    try:
        data = json_parse(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    kind, name = data.get("type"), data.get("id", data.get("name"))
    return (kind, name) if isinstance(kind, str) and isinstance(name, str) else None


# What users upload by mistake, by the first bytes of the file.
_NOT_JSONL = (
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (as .xlsx and .docx files are)"),
    (b"\x1f\x8b", "a gzip archive (decompress it first)"),
    (b"\xff\xfe", "UTF-16 text (save it as UTF-8)"),
    (b"\xfe\xff", "UTF-16 text (save it as UTF-8)"),
)
SNIFF_BYTES = 8192


def file_head_check(head: bytes) -> None:
    """Refuse at once, in one message, a file whose first bytes (up to SNIFF_BYTES) show it is
    not UTF-8 text: otherwise every line of an image would be reported as bad UTF-8."""
    found = next((name for magic, name in _NOT_JSONL if head.startswith(magic)), None)
    if found is None and b"\x00" in head:
        found = "a binary file (it has NUL bytes)"
    if found is not None:
        message = f"this is {found}, not a JSON Lines file (one JSON object per line, UTF-8)"
        raise ImportRejected([LineError(1, "(file)", message)], 1)


def _file_kind_check(path: Path) -> None:
    with open(path, "rb") as handle:
        file_head_check(handle.read(SNIFF_BYTES))


def _lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """Yield (line number, its offset in the file, line) for each non-blank line."""
    offset = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            stripped = raw.rstrip(b"\r\n")
            if stripped and not stripped.isspace():
                yield number, offset, stripped
            offset += len(raw)


def _line_at(path: Path, offset: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.readline().rstrip(b"\r\n")


def _parsed(chunk: list[bytes]) -> list[tuple[int, Any]]:
    """Spooled 'line-number TAB raw-json' lines as (line number, record)."""
    batch = []
    for row in chunk:
        number, _, raw = row.rstrip(b"\n").partition(b"\t")
        batch.append((int(number), record_parse(raw)))
    return batch


def _scan(
    path: Path,
    spool: _Spool,
    staged: StagedWriter | None,
    errors: _Errors,
    report: ImportReport,
    progress: Progress,
) -> None:
    # Each key's first line, a digest of that line's bytes and its offset in the file. A
    # repeat with the same bytes is dropped at once; only one whose bytes differ is compared
    # by content (`fingerprint`) with the first, parsed again, which spares most lines a
    # serialization.
    seen: dict[tuple[Any, ...], tuple[int, bytes, int]] = {}
    total = path.stat().st_size
    for number, offset, raw in _lines(path):
        report.lines += 1
        try:
            record = record_parse(raw)
        except RecordInvalid as exc:
            for field_name, message in exc.problems:
                errors.add(number, field_name, message)
            named = _record_named(raw) if errors.total < MAX_REPORTED_ERRORS else None
            if named is not None:
                errors.bad_lines.setdefault(named, number)
            continue
        key = record.key()
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        earlier = seen.get(key)
        if earlier is not None:
            if (
                earlier[1] != digest
                and record_parse(_line_at(path, earlier[2])).fingerprint() != record.fingerprint()
            ):
                errors.add(
                    number,
                    "id" if record.type in {"task", "response"} else "(record)",
                    f"conflicts with line {earlier[0]}, which describes the same "
                    f"{record.type.replace('_', ' ')} differently",
                )
            continue
        report.counts[record.type] += 1
        seen[key] = (number, digest, offset)
        if staged is not None and record.type in STAGED_KINDS:
            spool.write(record.type, staged_row(number, record))
        else:
            spool.write(record.type, b"%d\t%s\n" % (number, raw))
        if number % BATCH == 0:
            progress("Checking lines", offset, total)
    progress("Checking lines", total, total)


class _Writer:
    """Writes one record type at a time, resolving references against the database, and tallies
    whether each record created, updated or left unchanged what the project held."""

    def __init__(
        self,
        project: Project,
        staged: StagedWriter | None,
        errors: _Errors,
        report: ImportReport,
    ) -> None:
        self.project = project
        self.staged = staged
        self.errors = errors
        self.report = report
        # Draws may be split over batches: each cell's fields as first written (with its line)
        # and the line of every draw written, for the checks across a cell's draws.
        self.cells_seen: dict[tuple[int, str], tuple[int, tuple[Any, ...]]] = {}
        self.draw_lines: dict[tuple[int, str, int], int] = {}
        # Cells a synthesis record lists as having no draw, with that record's line.
        self.undrawn_lines: dict[tuple[int, str], int] = {}

    def tally(self, kind: str, before: Any, after: Any) -> None:
        """Count one written record: `before` is what the project held (None: nothing)."""
        if before is None:
            self.report.created[kind] += 1
        elif before == after:
            self.report.unchanged[kind] += 1
        else:
            self.report.updated[kind] += 1

    def tallied(self, kind: str, tally: Tally) -> None:
        """Count records that were written together, as `tally` would one at a time."""
        self.report.created[kind] += tally.created
        self.report.updated[kind] += tally.updated
        self.report.unchanged[kind] += tally.unchanged

    def write_batches(self, spool: _Spool, kind: str, method: str) -> Iterator[None]:
        """Write the kind's spooled records a batch at a time (all at once by COPY), yielding
        after each."""
        chunks = spool.chunks(kind, BATCH)
        if self.staged is not None and kind in STAGED_KINDS:
            if self.report.counts[kind]:
                self.staged_write(self.staged, kind, chunks)
                yield
        else:
            for chunk in chunks:
                getattr(self, method)(_parsed(chunk))
                yield

    def staged_write(self, staged: StagedWriter, kind: str, chunks: Iterator[list[bytes]]) -> None:
        if kind == "task":
            self.tallied("task", staged.tasks(chunks))
            return
        tally, problems = staged.responses(chunks)
        self.tallied("response", tally)
        for problem in problems:
            if problem.task_missing:
                self.missing(problem.line, "task", "task", problem.task)
            else:
                message = f"response {problem.response!r} already belongs to another task"
                self.errors.add(problem.line, "task", message)

    # Lookups shared by the label types -------------------------------------------------

    def tasks_by_id(self, ids: set[str]) -> dict[str, int]:
        rows = Task.objects.filter(project=self.project, external_id__in=ids)
        return dict(rows.values_list("external_id", "pk"))

    def responses_by_id(self, ids: set[str]) -> dict[str, tuple[int, int]]:
        rows = Response.objects.filter(project=self.project, external_id__in=ids)
        return {
            ext: (pk, task) for ext, pk, task in rows.values_list("external_id", "pk", "task_id")
        }

    def dimensions_by_name(self) -> dict[str, int]:
        return dict(Dimension.objects.filter(project=self.project).values_list("name", "pk"))

    def annotators_by_name(self, names: set[str]) -> dict[str, int]:
        Annotator.objects.bulk_create(
            [Annotator(project=self.project, name=name) for name in sorted(names)],
            ignore_conflicts=True,
        )
        rows = Annotator.objects.filter(project=self.project, name__in=names)
        return dict(rows.values_list("name", "pk"))

    def missing(self, line: int, field_name: str, kind: str, value: str) -> None:
        bad = self.errors.bad_lines.get((kind, value))
        if bad is not None:
            message = f"{kind} {value!r} is on line {bad}, which has errors: fix that line first"
        else:
            message = f"{kind} {value!r} not found in this file or the project"
        self.errors.add(line, field_name, message)

    # One method per record type --------------------------------------------------------

    def dimensions(self, batch: list[tuple[int, DimensionRecord]]) -> None:
        held = dict(
            Dimension.objects.filter(
                project=self.project, name__in=[r.name for _, r in batch]
            ).values_list("name", "description")
        )
        for _, r in batch:
            self.tally("dimension", held.get(r.name), r.description)
        Dimension.objects.bulk_create(
            [
                Dimension(project=self.project, name=r.name, description=r.description)
                for _, r in batch
            ],
            update_conflicts=True,
            unique_fields=["project", "name"],
            update_fields=["description"],
        )

    def tasks_held(self, ids: list[str]) -> dict[str, tuple[Any, ...]]:
        """Each existing task's fields and documents, in the shape `task_state` gives."""
        held = {
            ext: [domain, prompt, instructions, metadata, split, []]
            for ext, domain, prompt, instructions, metadata, split in Task.objects.filter(
                project=self.project, external_id__in=ids
            ).values_list("external_id", "domain", "prompt", "instructions", "metadata", "split")
        }
        documents = Document.objects.filter(task__project=self.project, task__external_id__in=ids)
        for task, ext, title, text in documents.order_by("position").values_list(
            "task__external_id", "external_id", "title", "text"
        ):
            held[task][5].append((ext, title, text))
        return {ext: tuple(state) for ext, state in held.items()}

    def tasks(self, batch: list[tuple[int, TaskRecord]]) -> None:
        fields = ["domain", "prompt", "instructions", "metadata"]
        held = self.tasks_held([r.id for _, r in batch])
        for _, r in batch:
            before = held.get(r.id)
            # A record without a split keeps the split already assigned in the app.
            split = r.split or (before[4] if before is not None else "unassigned")
            documents = [(d.id, d.title, d.text) for d in r.documents]
            after = (r.domain, r.prompt, r.instructions, r.metadata, split, documents)
            self.tally("task", before, after)
        # A record without a split keeps the split already assigned in the app.
        for with_split in (True, False):
            group = [r for _, r in batch if (r.split is not None) == with_split]
            if group:
                Task.objects.bulk_create(
                    [
                        Task(
                            project=self.project,
                            external_id=r.id,
                            domain=r.domain,
                            prompt=r.prompt,
                            instructions=r.instructions,
                            metadata=r.metadata,
                            split=r.split or "unassigned",
                        )
                        for r in group
                    ],
                    update_conflicts=True,
                    unique_fields=["project", "external_id"],
                    update_fields=[*fields, "split"] if with_split else fields,
                )
        task_pks = self.tasks_by_id({r.id for _, r in batch})
        documents = [
            Document(
                task_id=task_pks[r.id],
                external_id=d.id,
                title=d.title,
                text=d.text,
                position=position,
            )
            for _, r in batch
            for position, d in enumerate(r.documents)
        ]
        kept = Document.objects.bulk_create(
            documents,
            update_conflicts=True,
            unique_fields=["task", "external_id"],
            update_fields=["title", "text", "position"],
        )
        # Documents that the new record no longer lists are removed.
        stale = Document.objects.filter(task_id__in=task_pks.values()).exclude(
            pk__in=[d.pk for d in kept]
        )
        stale.delete()

    def responses(self, batch: list[tuple[int, ResponseRecord]]) -> None:
        task_pks = self.tasks_by_id({r.task for _, r in batch})
        existing = self.responses_by_id({r.id for _, r in batch})
        held = {
            ext: rest
            for ext, *rest in Response.objects.filter(
                project=self.project, external_id__in=[r.id for _, r in batch]
            ).values_list("external_id", "content", "messages", "source_model", "metadata")
        }
        rows = []
        for line, r in batch:
            task_pk = task_pks.get(r.task)
            if task_pk is None:
                self.missing(line, "task", "task", r.task)
                continue
            if r.id in existing and existing[r.id][1] != task_pk:
                self.errors.add(line, "task", f"response {r.id!r} already belongs to another task")
                continue
            row = Response(
                project=self.project,
                task_id=task_pk,
                external_id=r.id,
                content=r.content or "",
                messages=(
                    None
                    if r.messages is None
                    else [m.model_dump(exclude_none=True) for m in r.messages]
                ),
                source_model=r.source,
                metadata=r.metadata,
            )
            after = [row.content, row.messages, row.source_model, row.metadata]
            self.tally("response", held.get(r.id), after)
            rows.append(row)
        Response.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["project", "external_id"],
            update_fields=["content", "messages", "source_model", "metadata"],
        )

    def rubrics(self, batch: list[tuple[int, RubricRecord]]) -> None:
        task_pks = self.tasks_by_id({r.task for _, r in batch})
        current = {
            (rubric.task_id, rubric.author_kind, rubric.origin): rubric
            for rubric in Rubric.objects.filter(task_id__in=task_pks.values()).prefetch_related(
                "items"
            )
        }
        for line, r in batch:
            task_pk = task_pks.get(r.task)
            if task_pk is None:
                self.missing(line, "task", "task", r.task)
                continue
            wanted = [{"id": i.id, "text": i.text, "weight": i.weight} for i in r.items]
            rubric = current.get((task_pk, r.author, r.origin))
            before = None if rubric is None else rubric_items_snapshot(rubric)
            self.tally("rubric", before, wanted)
            if rubric is None:
                rubric = Rubric.objects.create(
                    task_id=task_pk, author_kind=r.author, origin=r.origin
                )
            elif before == wanted:
                continue
            else:
                rubric.version += 1
                rubric.save(update_fields=["version", "updated_at"])
            rubric_items_replace(rubric=rubric, items=wanted, editor="import")

    def criterion_grades(self, batch: list[tuple[int, CriterionGradeRecord]]) -> None:
        responses = self.responses_by_id({r.response for _, r in batch})
        task_pks = {task for _, task in responses.values()}
        items = {
            (task, kind, origin, key): pk
            for pk, task, kind, origin, key in RubricItem.objects.filter(
                rubric__task_id__in=task_pks
            ).values_list("pk", "rubric__task_id", "rubric__author_kind", "rubric__origin", "key")
        }
        annotators = self.annotators_by_name({r.annotator for _, r in batch})
        held = {
            (response, item, annotator): (passed, note)
            for response, item, annotator, passed, note in CriterionGrade.objects.filter(
                response_id__in=[pk for pk, _ in responses.values()]
            ).values_list("response_id", "item_id", "annotator_id", "passed", "note")
        }
        rows = []
        for line, r in batch:
            if r.response not in responses:
                self.missing(line, "response", "response", r.response)
                continue
            response_pk, task_pk = responses[r.response]
            item_pk = items.get((task_pk, r.rubric, r.origin, r.item))
            if item_pk is None:
                self.errors.add(
                    line, "item", f"item {r.item!r} is not in the task's {r.rubric} rubric"
                )
                continue
            key = (response_pk, item_pk, annotators[r.annotator])
            self.tally("criterion_grade", held.get(key), (r.passed, r.note))
            rows.append(
                CriterionGrade(
                    project=self.project,
                    response_id=response_pk,
                    item_id=item_pk,
                    passed=r.passed,
                    annotator_id=annotators[r.annotator],
                    note=r.note,
                )
            )
        CriterionGrade.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["response", "item", "annotator"],
            update_fields=["passed", "note"],
        )

    def scores(self, batch: list[tuple[int, ScoreRecord]]) -> None:
        responses = self.responses_by_id({r.response for _, r in batch})
        held = {
            (response, provider): value
            for response, provider, value in Score.objects.filter(
                response_id__in=[pk for pk, _ in responses.values()]
            ).values_list("response_id", "provider", "value")
        }
        rows = []
        for line, r in batch:
            if r.response not in responses:
                self.missing(line, "response", "response", r.response)
                continue
            response_pk = responses[r.response][0]
            self.tally("score", held.get((response_pk, r.provider)), r.value)
            rows.append(
                Score(
                    project=self.project,
                    response_id=response_pk,
                    provider=r.provider,
                    value=r.value,
                )
            )
        Score.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["response", "provider"],
            update_fields=["value"],
        )

    def dimension_pk(self, dimensions: dict[str, int], line: int, name: str | None) -> int | None:
        """The dimension's pk, 0 for no dimension, None (after recording an error) if unknown."""
        if name is None:
            return 0
        if name not in dimensions:
            self.missing(line, "dimension", "dimension", name)
            return None
        return dimensions[name]

    def judge_scores(self, batch: list[tuple[int, JudgeScoreRecord]]) -> None:
        responses = self.responses_by_id({r.response for _, r in batch})
        dimensions = self.dimensions_by_name()
        existing = {
            (row.judge, row.response_id, row.dimension_id or 0, row.run): row
            for row in JudgeScore.objects.filter(
                response_id__in=[pk for pk, _ in responses.values()]
            )
        }
        created, changed = [], []
        for line, r in batch:
            dimension = self.dimension_pk(dimensions, line, r.dimension)
            if r.response not in responses:
                self.missing(line, "response", "response", r.response)
                continue
            if dimension is None:
                continue
            response_pk = responses[r.response][0]
            row = existing.get((r.judge, response_pk, dimension, r.run))
            # A score may be null (a failed call), so what was held is compared as a 1-tuple.
            self.tally("judge_score", None if row is None else (row.score,), (r.score,))
            if row is None:
                created.append(
                    JudgeScore(
                        judge=r.judge,
                        response_id=response_pk,
                        dimension_id=dimension or None,
                        run=r.run,
                        score=r.score,
                    )
                )
            elif row.score != r.score:
                row.score = r.score
                changed.append(row)
        JudgeScore.objects.bulk_update(changed, ["score"])
        JudgeScore.objects.bulk_create(created)

    def preferences(self, batch: list[tuple[int, PreferenceRecord]]) -> None:
        responses = self.responses_by_id({x for _, r in batch for x in (r.a, r.b)})
        dimensions = self.dimensions_by_name()
        annotators = self.annotators_by_name({r.annotator_name for _, r in batch})
        pks = [pk for pk, _ in responses.values()]
        current = {
            preference_key(p): p
            for p in Preference.objects.filter(
                Q(response_a_id__in=pks) | Q(response_b_id__in=pks), is_current=True
            )
        }
        implying = self.draws_implying(pks)
        retired, created = [], []
        for line, r in batch:
            dimension = self.dimension_pk(dimensions, line, r.dimension)
            sides = [responses.get(r.a), responses.get(r.b)]
            for side, name, found in (("a", r.a, sides[0]), ("b", r.b, sides[1])):
                if found is None:
                    self.missing(line, side, "response", name)
            if sides[0] is None or sides[1] is None or dimension is None:
                continue
            (a_pk, a_task), (b_pk, b_task) = sides
            if a_task != b_task:
                self.errors.add(line, "b", "responses a and b belong to different tasks")
                continue
            new = Preference(
                task_id=a_task,
                response_a_id=a_pk,
                response_b_id=b_pk,
                choice=r.choice,
                confidence=r.confidence,
                dimension_id=dimension or None,
                provider=r.provider,
                annotator_id=annotators[r.annotator_name],
                slot_order=r.slot_order,
                seconds_spent=r.seconds_spent,
            )
            low, high = sorted((a_pk, b_pk))
            implied = implying.get((low, high, new.dimension_id, r.annotator_name))
            if r.provider == "synthetic" and implied not in {None, preference_winner(new)}:
                self.errors.add(
                    line,
                    "choice",
                    f"contradicts synthesis {r.annotator_name!r}, whose draw of this pair "
                    "implies a preference for its higher-level response",
                )
                continue
            old = current.get(preference_key(new))
            if old is None:
                self.report.created["preference"] += 1
            elif preference_same(old, new):
                self.report.unchanged["preference"] += 1
                continue
            else:
                self.report.updated["preference"] += 1
                retired.append(old.pk)
            created.append(new)
        # Retire before inserting: the one-current constraint would refuse the new rows.
        Preference.objects.filter(pk__in=retired).update(is_current=False)
        Preference.objects.bulk_create(created)

    def draws_implying(self, pks: list[int]) -> dict[tuple[int, int, int | None, str], int]:
        """The higher-level response of each held draw among `pks`, by (lower pk, higher pk,
        dimension, synthesis id): FORMATS.md says a draw implies a synthetic preference for
        it, annotated by the synthesis."""
        rows = SynthesisDraw.objects.filter(
            cell__synthesis__project=self.project, low_response_id__in=pks
        ).values_list(
            "low_response_id",
            "high_response_id",
            "cell__dimension_id",
            "cell__synthesis__external_id",
        )
        return {
            (min(low, high), max(low, high), dimension, synthesis): high
            for low, high, dimension, synthesis in rows
            if high is not None
        }

    def syntheses(self, batch: list[tuple[int, SynthesisRecord]]) -> None:
        undrawn_held: dict[str, list[tuple[Any, ...]]] = {}
        for ext, cell, task, dimension, low, high, agent, error in (
            SynthesisCell.objects.filter(
                synthesis__project=self.project,
                synthesis__external_id__in=[r.id for _, r in batch],
                draws__isnull=True,
            )
            .order_by("external_id")
            .values_list(
                "synthesis__external_id", "external_id", "task__external_id", "dimension__name",
                "low_level", "high_level", "agent", "error",
            )
        ):  # fmt: skip
            undrawn_held.setdefault(ext, []).append(
                (cell, task, dimension, [low, high], agent, error)
            )
        held = {
            ext: (judges, retries, undrawn_held.get(ext, []))
            for ext, judges, retries in Synthesis.objects.filter(
                project=self.project, external_id__in=[r.id for _, r in batch]
            ).values_list("external_id", "judges", "retries")
        }
        for _, r in batch:
            undrawn = sorted(
                (c.id, c.task, c.dimension, list(c.levels), c.agent, c.error)
                for c in r.undrawn_cells
            )
            # Held cells the record does not list are left as they are, so they are not
            # compared: leaving the list out changes nothing.
            before = held.get(r.id)
            if before is not None:
                listed = {cell[0] for cell in undrawn}
                before = (
                    before[0],
                    before[1],
                    sorted(cell for cell in before[2] if cell[0] in listed),
                )
            self.tally("synthesis", before, (r.judges, r.retries, undrawn))
        Synthesis.objects.bulk_create(
            [
                Synthesis(
                    project=self.project, external_id=r.id, judges=r.judges, retries=r.retries
                )
                for _, r in batch
            ],
            update_conflicts=True,
            unique_fields=["project", "external_id"],
            update_fields=["judges", "retries"],
        )
        self._undrawn_cells_write(batch)

    def _undrawn_cells_write(self, batch: list[tuple[int, SynthesisRecord]]) -> None:
        listed = [(line, r, c) for line, r in batch for c in r.undrawn_cells]
        if not listed:
            return
        syntheses = dict(
            Synthesis.objects.filter(
                project=self.project, external_id__in=[r.id for _, r in batch]
            ).values_list("external_id", "pk")
        )
        tasks = self.tasks_by_id({c.task for _, _, c in listed})
        dimensions = self.dimensions_by_name()
        wanted: dict[tuple[int, str], tuple[Any, ...]] = {}
        errors: dict[tuple[int, str], str] = {}
        for line, r, c in listed:
            task, dimension = tasks.get(c.task), dimensions.get(c.dimension)
            if task is None:
                self.missing(line, "undrawn_cells.task", "task", c.task)
            if dimension is None:
                self.missing(line, "undrawn_cells.dimension", "dimension", c.dimension)
            if task is None or dimension is None:
                continue
            key = (syntheses[r.id], c.id)
            wanted[key] = (task, dimension, c.levels[0], c.levels[1], c.agent)
            errors[key] = c.error
            self.undrawn_lines[key] = line
        cells = self._cells_upsert(wanted)
        held: dict[int, str] = {}
        for chunk in batched(cells.values(), 5000):
            held.update(SynthesisCell.objects.filter(pk__in=chunk).values_list("pk", "error"))
        changed = [
            SynthesisCell(pk=cells[key], error=error)
            for key, error in errors.items()
            if held[cells[key]] != error
        ]
        SynthesisCell.objects.bulk_update(changed, ["error"], batch_size=2000)

    def _draw_resolved(
        self,
        line: int,
        r: SynthesisDrawRecord,
        syntheses: dict[str, Synthesis],
        tasks: dict[str, int],
        dimensions: dict[str, int],
        responses: dict[str, tuple[int, int]],
    ) -> tuple[Synthesis, int, int, tuple[int | None, int | None], str] | None:
        """The draw's synthesis, task, dimension, (low, high) responses and outcome, or None
        after recording every problem."""
        synthesis = syntheses.get(r.synthesis)
        task = tasks.get(r.task)
        dimension = dimensions.get(r.dimension)
        ok = True
        for value, field_name, kind, name in (
            (synthesis, "synthesis", "synthesis", r.synthesis),
            (task, "task", "task", r.task),
            (dimension, "dimension", "dimension", r.dimension),
        ):
            if value is None:
                self.missing(line, field_name, kind, name)
                ok = False
        pair: tuple[int | None, int | None] = (None, None)
        if r.responses is not None:
            found = [responses.get(name) for name in r.responses]
            for name, hit in zip(r.responses, found, strict=True):
                if hit is None:
                    self.missing(line, "responses", "response", name)
                    ok = False
                elif task is not None and hit[1] != task:
                    self.errors.add(
                        line, "responses", f"response {name!r} does not belong to task {r.task!r}"
                    )
                    ok = False
            if ok:
                pair = (found[0][0], found[1][0])  # type: ignore[index]
        outcome = ""
        if synthesis is not None:
            if r.retry > synthesis.retries:
                self.errors.add(
                    line,
                    "retry",
                    f"retry {r.retry} is above synthesis {r.synthesis!r}'s retries "
                    f"({synthesis.retries})",
                )
                ok = False
            try:
                outcome = r.outcome_for(list(synthesis.judges))
            except ValueError as exc:
                field_name, _, message = str(exc).partition(": ")
                self.errors.add(line, field_name, message)
                ok = False
        if not ok or synthesis is None or task is None or dimension is None:
            return None
        return synthesis, task, dimension, pair, outcome

    def synthesis_draws(self, batch: list[tuple[int, SynthesisDrawRecord]]) -> None:
        syntheses = {
            s.external_id: s
            for s in Synthesis.objects.filter(
                project=self.project, external_id__in={r.synthesis for _, r in batch}
            )
        }
        tasks = self.tasks_by_id({r.task for _, r in batch})
        dimensions = self.dimensions_by_name()
        responses = self.responses_by_id({x for _, r in batch for x in r.responses or ()})
        resolved = []
        for line, r in batch:
            found = self._draw_resolved(line, r, syntheses, tasks, dimensions, responses)
            if found is None:
                continue
            synthesis, task, dimension, pair, outcome = found
            cell_fields = (task, dimension, r.levels[0], r.levels[1], r.agent)
            key = (synthesis.pk, r.cell)
            if key in self.undrawn_lines:
                self.errors.add(
                    line,
                    "cell",
                    f"cell {r.cell!r} has a draw, but synthesis {r.synthesis!r} on line "
                    f"{self.undrawn_lines[key]} lists it among its undrawn cells",
                )
                continue
            earlier = self.cells_seen.setdefault(key, (line, cell_fields))
            if earlier[1] != cell_fields:
                self.errors.add(
                    line,
                    "cell",
                    f"cell {r.cell!r} has another task, dimension, levels or agent on line "
                    f"{earlier[0]}; a cell's draws share them",
                )
                continue
            self.draw_lines[(synthesis.pk, r.cell, r.retry)] = line
            resolved.append((line, r, synthesis, cell_fields, pair, outcome))
        if not resolved:
            return
        # What the project held, read before the cells are rewritten: a draw whose cell
        # changed (its agent, say) counts as updated.
        held = {
            (d.cell.synthesis_id, d.cell.external_id, d.retry): draw_state(d)
            for d in SynthesisDraw.objects.filter(
                cell__synthesis_id__in={s.pk for _, _, s, *_ in resolved},
                cell__external_id__in={r.cell for _, r, *_ in resolved},
            )
            .select_related("cell")
            .prefetch_related("votes")
        }
        cells = self._cells_upsert({(s.pk, r.cell): f for _, r, s, f, _, _ in resolved})
        draws = []
        for _line, r, synthesis, fields, (low, high), outcome in resolved:
            cell = cells[(synthesis.pk, r.cell)]
            votes = [(v.judge, v.agrees, v.slot_order, list(v.answers)) for v in r.votes]
            after = (fields, low, high, outcome, r.cost, r.error, r.usage_json, votes)
            self.tally("synthesis_draw", held.get((synthesis.pk, r.cell, r.retry)), after)
            draws.append(
                SynthesisDraw(
                    cell_id=cell,
                    retry=r.retry,
                    low_response_id=low,
                    high_response_id=high,
                    outcome=outcome,
                    cost=r.cost,
                    error=r.error,
                    usage=r.usage_json,
                )
            )
        SynthesisDraw.objects.bulk_create(
            draws,
            update_conflicts=True,
            unique_fields=["cell", "retry"],
            update_fields=["low_response", "high_response", "outcome", "cost", "error", "usage"],
        )
        draw_pks = {
            (cell, retry): pk
            for pk, cell, retry in SynthesisDraw.objects.filter(
                cell_id__in=cells.values()
            ).values_list("pk", "cell_id", "retry")
        }
        votes_new: dict[int, list[SynthesisVote]] = {}
        for _line, r, synthesis, *_ in resolved:
            draw = draw_pks[(cells[(synthesis.pk, r.cell)], r.retry)]
            votes_new[draw] = [
                SynthesisVote(
                    draw_id=draw,
                    position=position,
                    judge=v.judge,
                    agrees=v.agrees,
                    slot_order=v.slot_order,
                    answers=list(v.answers),
                )
                for position, v in enumerate(r.votes)
            ]
        # Votes are replaced whole per draw, so a shorter cascade leaves no stale vote behind.
        SynthesisVote.objects.filter(draw_id__in=votes_new).delete()
        SynthesisVote.objects.bulk_create([v for group in votes_new.values() for v in group])
        self._implied_preferences(
            [
                (line, synthesis, fields[0], fields[1], low, high)
                for line, _r, synthesis, fields, (low, high), _ in resolved
                if low is not None and high is not None
            ]
        )

    def _implied_preferences(self, draws: list[tuple[int, Synthesis, int, int, int, int]]) -> None:
        """The synthetic preference each draw (line, synthesis, task, dimension, low, high)
        implies (its higher-level response wins), written unless it is already held; one that
        says otherwise is an error, wherever it came from. One read and one write for all."""
        if not draws:
            return
        annotators = self.annotators_by_name({synthesis.external_id for _, synthesis, *_ in draws})
        pks = {pk for *_, low, high in draws for pk in (low, high)}
        held = {
            (
                min(p.response_a_id, p.response_b_id),
                max(p.response_a_id, p.response_b_id),
                p.dimension_id,
                p.annotator_id,
            ): p
            for p in Preference.objects.filter(
                Q(response_a_id__in=pks) | Q(response_b_id__in=pks),
                annotator_id__in=annotators.values(),
                is_current=True,
            )
        }
        new = []
        for line, synthesis, task, dimension, low, high in draws:
            annotator = annotators[synthesis.external_id]
            key = (min(low, high), max(low, high), dimension, annotator)
            old = held.get(key)
            if old is None:
                held[key] = Preference(
                    task_id=task,
                    response_a_id=low,
                    response_b_id=high,
                    choice="b",
                    dimension_id=dimension,
                    provider="synthetic",
                    annotator_id=annotator,
                )
                new.append(held[key])
            elif preference_winner(old) != high or old.provider != "synthetic":
                self.errors.add(
                    line,
                    "responses",
                    f"the draw implies a synthetic preference for the second response on its "
                    f"dimension, but a {old.provider} preference by {synthesis.external_id!r} on "
                    "the same pair says otherwise",
                )
        Preference.objects.bulk_create(new)

    def synthesis_cells_check(self) -> None:
        """Across each written cell's draws, held ones included: retries run 0, 1, ... with no
        gap, and only a vetoed draw (or a failed one) is followed by another."""
        if not self.cells_seen:
            return
        cells = SynthesisCell.objects.filter(
            synthesis__project=self.project,
            synthesis_id__in={synthesis for synthesis, _ in self.cells_seen},
            external_id__in={cell for _, cell in self.cells_seen},
        ).prefetch_related("draws")
        for cell in cells:
            key = (cell.synthesis_id, cell.external_id)
            if key not in self.cells_seen:
                continue
            draws = sorted(cell.draws.all(), key=lambda d: d.retry)
            for index, draw in enumerate(draws):
                line = self.draw_lines.get((*key, draw.retry), self.cells_seen[key][0])
                if draw.retry != index:
                    self.errors.add(
                        line,
                        "retry",
                        f"cell {cell.external_id!r} has retry {draw.retry} but no retry "
                        f"{index}: retries count up from 0",
                    )
                    break
                if index and draws[index - 1].outcome in {"kept", "pending"}:
                    self.errors.add(
                        line,
                        "retry",
                        f"cell {cell.external_id!r} is redrawn after a {draws[index - 1].outcome} "
                        f"draw (retry {index - 1}); only a rejected cell is redrawn",
                    )
                    break

    def _cells_upsert(
        self, wanted: dict[tuple[int, str], tuple[Any, ...]]
    ) -> dict[tuple[int, str], int]:
        """Create or update the cells (task, dimension, levels, agent; steering and error made
        by a generated run stay as they are) and return their pks by (synthesis, id)."""
        SynthesisCell.objects.bulk_create(
            [
                SynthesisCell(
                    synthesis_id=synthesis,
                    external_id=cell,
                    task_id=task,
                    dimension_id=dimension,
                    low_level=low,
                    high_level=high,
                    agent=agent,
                )
                for (synthesis, cell), (task, dimension, low, high, agent) in wanted.items()
            ],
            update_conflicts=True,
            unique_fields=["synthesis", "external_id"],
            update_fields=["task", "dimension", "low_level", "high_level", "agent"],
        )
        rows = SynthesisCell.objects.filter(
            synthesis_id__in={synthesis for synthesis, _ in wanted},
            external_id__in={cell for _, cell in wanted},
        ).values_list("pk", "synthesis_id", "external_id")
        return {(synthesis, cell): pk for pk, synthesis, cell in rows}


def draw_state(draw: SynthesisDraw) -> tuple[Any, ...]:
    """A held draw in the shape `_Writer.synthesis_draws` compares a record with."""
    votes = [(v.judge, v.agrees, v.slot_order, v.answers) for v in draw.votes.all()]
    cell = draw.cell
    return (
        (cell.task_id, cell.dimension_id, cell.low_level, cell.high_level, cell.agent),
        draw.low_response_id,
        draw.high_response_id,
        draw.outcome,
        draw.cost,
        draw.error,
        draw.usage,
        votes,
    )


def preference_key(p: Preference) -> tuple[int, int, int, int]:
    low, high = sorted((p.response_a_id, p.response_b_id))
    return (low, high, p.dimension_id or 0, p.annotator_id)


def preference_winner(p: Preference) -> int | None:
    return {"a": p.response_a_id, "b": p.response_b_id}.get(p.choice)


def preference_same(old: Preference, new: Preference) -> bool:
    """Same label whichever side each response was written on."""
    return (
        preference_winner(old),
        old.confidence,
        old.provider,
        old.slot_order,
        old.seconds_spent,
    ) == (
        preference_winner(new),
        new.confidence,
        new.provider,
        new.slot_order,
        new.seconds_spent,
    )


WRITE_ORDER = (
    ("dimension", "dimensions"),
    ("task", "tasks"),
    ("response", "responses"),
    ("rubric", "rubrics"),
    ("criterion_grade", "criterion_grades"),
    ("score", "scores"),
    ("judge_score", "judge_scores"),
    ("preference", "preferences"),
    ("synthesis", "syntheses"),
    ("synthesis_draw", "synthesis_draws"),
)


class _Rollback(Exception):
    pass


class ImportStopped(Exception):
    """`should_stop` answered yes while writing; the transaction was rolled back."""


def jsonl_import(
    *,
    project: Project,
    path: Path,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ImportReport:
    """Import a JSONL file into `project`, all or nothing.

    Raises ImportRejected listing every bad line (up to MAX_REPORTED_ERRORS) with nothing
    written. `progress(stage, done, total)` is called during the scan and before the write
    transaction opens (never inside it); it may raise to cancel. `should_stop()` is asked between
    write batches; yes rolls everything back and raises ImportStopped.
    """
    report_progress: Progress = progress or (lambda stage, done, total: None)
    _file_kind_check(path)
    errors = _Errors()
    report = ImportReport()
    staged = StagedWriter(project.pk) if connection.vendor == "postgresql" else None
    with tempfile.TemporaryDirectory(prefix="import-") as folder:
        spool = _Spool(folder)
        try:
            _scan(path, spool, staged, errors, report, report_progress)
            if errors.total >= MAX_REPORTED_ERRORS:
                raise ImportRejected(errors.items, errors.total)
            writer = _Writer(project, staged, errors, report)
            report_progress("Writing records", 0, sum(report.counts.values()))
            try:
                with transaction.atomic():
                    for kind, method in WRITE_ORDER:
                        for _ in writer.write_batches(spool, kind, method):
                            if should_stop is not None and should_stop():
                                raise ImportStopped
                    writer.synthesis_cells_check()
                    if staged is not None:
                        staged.close()
                    if errors.total:
                        raise _Rollback
            except _Rollback:
                pass
        finally:
            spool.close()
    if errors.total:
        errors.items.sort(key=lambda e: e.line)
        raise ImportRejected(errors.items, errors.total)
    return report
