"""The harness mode's two halves on the Django side: the steering jobs a run owes, as JSON
Lines for the user's harness, and the trajectories it sends back, imported against them.

An import is all or nothing like every import here (FORMATS.md): any bad line rejects the file
with errors naming the line and the field, and nothing is written. Each line answers one open
job: {"cell": KEY, "level": LEVEL, "attempt": N, "content": TEXT} or with "messages" (and
optionally "cost"). The stored rollouts queue the run again, so its next pass sends them
through the cascade and owes the next attempt of any cell vetoed."""

import json
from collections.abc import Iterable, Iterator

from django.db import transaction

from graders.engine.synthesis.rollout import RolloutFailed
from graders.engine.synthesis.types import Rollout
from graders.models import RolloutMode, SynthesisRun
from graders.synthesis.rollers import RolloutJob, open_jobs
from graders.synthesis.runs import synthesis_resume
from graders.synthesis.store import RowCellStore
from graders.synthesis.webhook import trajectory_from
from labeling.imports import ImportRejected, LineError
from labeling.json_input import json_parse
from labeling.models import Job

MAX_IMPORT_ERRORS = 1000


def harness_jobs(*, run: SynthesisRun) -> list[RolloutJob]:
    """The rollouts the run waits for, in cell order."""
    return open_jobs(run, RowCellStore(run, None, changed=lambda: None, stopped=lambda: False))


def harness_jobs_jsonl(*, run: SynthesisRun) -> Iterator[str]:
    """One line per open job: its cell, task, level, attempt, agent and the full addition to
    the agent's system prompt."""
    for job in harness_jobs(run=run):
        record = {"type": "rollout_job", "synthesis": run.synthesis.external_id, **job.as_json()}
        yield json.dumps(record, ensure_ascii=False) + "\n"


@transaction.atomic
def harness_import(*, run: SynthesisRun, lines: Iterable[bytes | str]) -> int:
    """Store the trajectories of open jobs and queue the run again; the number stored. A line
    repeating a trajectory already stored changes nothing (the same file imported twice).
    Raises ImportRejected (line and field per problem, nothing written) on any bad line."""
    if run.mode != RolloutMode.HARNESS:
        raise ImportRejected([LineError(0, "mode", "this run does not use a harness")], 1)
    # A pass still running holds its own view of the rows and would not pick these up.
    if Job.objects.filter(pk=run.job_id, status__in=Job.ACTIVE).exists():
        message = "the run is still going: import once its job has stopped"
        raise ImportRejected([LineError(0, "run", message)], 1)
    store = RowCellStore(run, None, changed=lambda: None, stopped=lambda: False)
    jobs = {(j.cell, j.level, j.attempt): j for j in open_jobs(run, store)}
    errors: list[LineError] = []
    found: dict[tuple[str, str, int], tuple[int, Rollout]] = {}
    read = 0
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        read += 1
        problem = _line_read(number, raw, jobs, found, store)
        if problem is not None:
            errors.append(problem)
            if len(errors) >= MAX_IMPORT_ERRORS:
                break
    if not read and not errors:
        errors.append(LineError(0, "file", "no trajectories in the file"))
    if errors:
        raise ImportRejected(errors, len(errors))
    for (cell, level, attempt), (_, rollout) in sorted(found.items()):
        store.rollout_save(cell, attempt, level, rollout)
    if found:
        synthesis_resume(run=run)
    return len(found)


def _line_read(
    number: int,
    raw: bytes | str,
    jobs: dict[tuple[str, str, int], RolloutJob],
    found: dict[tuple[str, str, int], tuple[int, Rollout]],
    store: RowCellStore,
) -> LineError | None:
    try:
        record = json_parse(raw)
    except ValueError as exc:
        return LineError(number, "line", f"not JSON: {exc}")
    if not isinstance(record, dict):
        return LineError(number, "line", "not a JSON object")
    for field, kind in (("cell", str), ("level", str), ("attempt", int)):
        value = record.get(field)
        if not isinstance(value, kind) or isinstance(value, bool):
            return LineError(number, field, f"missing, or not a {kind.__name__}")
    key = (record["cell"], record["level"], record["attempt"])
    try:
        rollout = trajectory_from(record)
    except RolloutFailed as exc:
        field, _, message = str(exc).partition(": ")
        return LineError(number, field, message or field)
    held = store.rollout_held(key[0], key[2], key[1])
    if held is not None and (held.content, held.messages) == (rollout.content, rollout.messages):
        return None  # the same file again: what it says is stored already
    if key not in jobs:
        return LineError(
            number,
            "cell",
            f"no open job for cell {key[0]!r}, level {key[1]!r}, attempt {key[2]} (export the "
            "open jobs again: a job already answered or not yet due is not open)",
        )
    if key in found:
        return LineError(number, "cell", f"the same job is answered on line {found[key][0]}")
    found[key] = (number, rollout)
    return None
