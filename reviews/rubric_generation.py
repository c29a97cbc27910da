"""Writing rubrics for chosen tasks with the selected rubric grader, as one background job.

Each task gets a Rubric(author_kind="generated", origin=the program's content hash) whose
items are the program's criteria; a later grading run of that program reads the stored (and
by then perhaps reviewed) rubric instead of writing a new one.

Safe to run twice: a task that already has a rubric of this program is skipped unless the job
asks to regenerate, and regenerating writes a new version only when the criteria differ (the
judge answers of a rerun come from the cache, so a redelivered job changes nothing)."""

import asyncio
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from graders.engine.judge import JudgeClient, JudgeSettings, Usage
from graders.engine.programs import (
    DocumentInput,
    GeneratedRubric,
    Program,
    TaskInput,
    program_validate,
    rubric_generate,
)
from graders.judge_cache import DatabaseJudgeCache
from graders.models import JudgeEndpoint, Metagrader
from graders.services import endpoint_settings
from labeling.jobs import JobCancelled, job_claim, job_create, job_finish, job_progress
from labeling.models import AuthorKind, Job, JobStatus, Project, Rubric, Task
from labeling.rubric_items import rubric_items_replace, rubric_items_snapshot, rubric_keys_unused
from reviews.rubric_grader import grader_origin, rubric_grader, rubric_judge

GENERATION_JOB = "rubric_generation"
MAX_REPORTED_FAILURES = 50


class GenerationInvalid(ValueError):
    pass


def rubric_generation_start(
    *,
    project: Project,
    task_ids: Sequence[str] = (),
    split: str = "",
    regenerate: bool = False,
    user: Any = None,
) -> Job:
    """Queue a job writing rubrics for the given tasks (or a split's) with the selected rubric
    grader on the default judge. Raises RubricSetupMissing or GenerationInvalid."""
    grader = rubric_grader(project=project)
    endpoint = rubric_judge(project=project)
    tasks = Task.objects.filter(project=project)
    if task_ids:
        tasks = tasks.filter(external_id__in=task_ids)
        missing = set(task_ids) - set(tasks.values_list("external_id", flat=True))
        if missing:
            raise GenerationInvalid(f"unknown task ids: {', '.join(sorted(missing)[:10])}")
    elif split:
        tasks = tasks.filter(split=split)
    else:
        raise GenerationInvalid("choose tasks or a split")
    task_pks = list(tasks.order_by("external_id").values_list("pk", flat=True))
    if not task_pks:
        raise GenerationInvalid("no tasks in this selection")
    from reviews.rubric_jobs import rubric_generation_task  # that module imports this one

    with transaction.atomic():
        job = job_create(
            kind=GENERATION_JOB,
            project=project,
            user=user,
            params={
                "metagrader": grader.pk,
                "endpoint": endpoint.pk,
                "tasks": task_pks,
                "split": "" if task_ids else split,
                "regenerate": regenerate,
            },
        )
        rubric_generation_task.delay_on_commit(job.pk)
    return job


def rubric_generation_execute(*, job_id: int, redelivered: bool = False) -> dict[str, Any]:
    """Run a generation job: claim it, write the rubrics chunk by chunk, report progress and
    cost, stop on cancel. Returns the counts that also go into Job.result."""
    job = job_claim(job_id=job_id, redelivered=redelivered)
    if job is None:
        return {"job": job_id, "skipped": True}
    outcome = _Outcome()
    try:
        # Named by id in the job: either may have been deleted since it was queued, which
        # fails the job below instead of leaving it running.
        grader = Metagrader.objects.get(pk=job.params["metagrader"])
        endpoint = JudgeEndpoint.objects.get(pk=job.params["endpoint"])
        _generate(job, grader, endpoint, outcome)
    except JobCancelled:
        job_finish(job=job, status=JobStatus.CANCELLED, result=outcome.result(), error="Cancelled.")
        return {"job": job_id, "status": "cancelled"}
    except Exception as exc:
        job_finish(
            job=job,
            status=JobStatus.FAILED,
            result=outcome.result(),
            error=f"{type(exc).__name__}: {exc}",
        )
        raise
    failed = outcome.counts["failed"]
    if failed and failed == sum(outcome.counts.values()):
        # Nothing written, rewritten or kept: a failed job, not a success with footnotes.
        first = outcome.failures[0]
        error = (
            f"No rubric was written: all {failed} task{'s' if failed > 1 else ''} failed "
            f"(task {first['task']}: {first['error']})."
        )
        job_finish(job=job, status=JobStatus.FAILED, result=outcome.result(), error=error)
        return {"job": job_id, "status": "failed", **outcome.counts}
    job_finish(job=job, status=JobStatus.SUCCEEDED, result=outcome.result())
    return {"job": job_id, "status": "succeeded", **outcome.counts}


class _Outcome:
    def __init__(self) -> None:
        self.counts = {"generated": 0, "updated": 0, "unchanged": 0, "skipped": 0, "failed": 0}
        self.failures: list[dict[str, str]] = []
        self.usage = Usage()

    def result(self) -> dict[str, Any]:
        return {**self.counts, "failures": self.failures, "usage": self.usage.as_dict()}


def _generate(job: Job, grader: Metagrader, endpoint: JudgeEndpoint, outcome: _Outcome) -> None:
    program = program_validate(grader.program)
    origin = grader_origin(grader)
    settings = endpoint_settings(endpoint)
    cache = DatabaseJudgeCache(endpoint)
    task_pks: list[int] = job.params["tasks"]
    size = max(1, min(32, settings.max_concurrency))
    for start in range(0, len(task_pks), size):
        job_progress(job=job, stage="Writing rubrics", done=start, total=len(task_pks))
        chunk = task_pks[start : start + size]
        if not job.params.get("regenerate"):
            done = set(
                Rubric.objects.filter(
                    task_id__in=chunk, author_kind=AuthorKind.GENERATED, origin=origin
                ).values_list("task_id", flat=True)
            )
            outcome.counts["skipped"] += len(done)
            chunk = [pk for pk in chunk if pk not in done]
        inputs = _task_inputs(chunk)
        written, usage = cache.run(_rubrics_write(program, settings, cache, inputs))
        for key, value in usage.as_dict().items():
            setattr(outcome.usage, key, getattr(outcome.usage, key) + value)
        Job.objects.filter(pk=job.pk).update(cost=round(outcome.usage.cost, 6))
        for task_pk, generated in zip(chunk, written, strict=True):
            if generated.error is not None:
                outcome.counts["failed"] += 1
                if len(outcome.failures) < MAX_REPORTED_FAILURES:
                    outcome.failures.append({"task": generated.task_id, "error": generated.error})
                continue
            state = generated_rubric_store(
                task_pk=task_pk, origin=origin, generated=generated, editor=f"grader {grader.pk}"
            )
            outcome.counts[state] += 1
    job_progress(job=job, stage="Done", done=len(task_pks), total=len(task_pks))


def _task_inputs(task_pks: list[int]) -> list[TaskInput]:
    tasks = Task.objects.prefetch_related("documents").in_bulk(task_pks)
    return [
        TaskInput(
            task.external_id,
            task.prompt,
            task.instructions,
            tuple(DocumentInput(d.external_id, d.title, d.text) for d in task.documents.all()),
        )
        for task in (tasks[pk] for pk in task_pks)
    ]


async def _rubrics_write(
    program: Program, settings: JudgeSettings, cache: DatabaseJudgeCache, tasks: list[TaskInput]
) -> tuple[list[GeneratedRubric], Usage]:
    async with JudgeClient(settings, cache=cache) as judge:
        written = await asyncio.gather(*(rubric_generate(program, task, judge) for task in tasks))
    return list(written), judge.usage


def _rekeyed(
    rubric: Rubric, current: list[dict[str, Any]], written: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`written` keyed so that a criterion keeps its experts' grades and no grade passes to a
    different criterion. The judge numbers criteria c1, c2, ... afresh each time, so a number
    says little: a criterion takes the key that holds its text in `current` (the rubric's
    items) or once held it; else its own number, if that number never held another text; else
    a key never used."""
    held: dict[str, set[str]] = {}  # key -> every text it has held, current ones included
    for items in rubric.revisions.values_list("items", flat=True):
        for item in items:
            held.setdefault(item["id"], set()).add(item["text"])
    now = {item["text"]: item["id"] for item in current}
    earlier: dict[str, str] = {}
    for key, texts in held.items():
        for text in texts:
            earlier.setdefault(text, key)
    keys: list[str | None] = [None] * len(written)
    used: set[str] = set()
    # A key goes first to the criterion whose text it holds now, then to one it held before.
    for by_text in (now, earlier):
        for at, item in enumerate(written):
            key = by_text.get(item["text"])
            if keys[at] is None and key is not None and key not in used:
                keys[at] = key
                used.add(key)
    for at, item in enumerate(written):
        own = item["id"]
        if keys[at] is None and own not in used and held.get(own, {item["text"]}) <= {item["text"]}:
            keys[at] = own
            used.add(own)
    missing = keys.count(None)
    fresh = iter(
        rubric_keys_unused(rubric, missing, used | {i["id"] for i in written}) if missing else []
    )
    return [{**item, "id": key or next(fresh)} for item, key in zip(written, keys, strict=True)]


def generated_rubric_store(
    *, task_pk: int, origin: str, generated: GeneratedRubric, editor: str
) -> str:
    """Store a written rubric as the task's generated rubric of `origin`: "generated" when new,
    "updated" as a new version when its criteria differ, else "unchanged". The row is locked
    and its version bumped, so a reviewer's save based on the older version gets a conflict
    instead of silently undoing the regeneration (or being undone by it)."""
    items = [{"id": c.id, "text": c.text, "weight": c.weight} for c in generated.criteria]
    with transaction.atomic():
        rubric, created = Rubric.objects.select_for_update().get_or_create(
            task_id=task_pk, author_kind=AuthorKind.GENERATED, origin=origin
        )
        if not created:
            current = rubric_items_snapshot(rubric)
            items = _rekeyed(rubric, current, items)  # first: a rubric once rekeyed keeps it
            if current == items:
                return "unchanged"
            rubric.version += 1
            Rubric.objects.filter(pk=rubric.pk).update(
                version=rubric.version, updated_at=timezone.now()
            )
        rubric_items_replace(rubric=rubric, items=items, editor=editor)
    return "generated" if created else "updated"
