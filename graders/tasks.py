"""Celery tasks of the grading side: take ids, call one service, return a small dict."""

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from graders.capture import capture_groups_store
from graders.grading import grading_run_execute
from graders.research import ResearchInvalid, research_on_drift
from graders.search import search_run_execute
from graders.synthesis.execute import synthesis_run_execute
from graders.synthesis.sweep_run import sweep_execute
from labeling.models import Project

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def grading_run_task(run_id: int) -> dict[str, Any]:
    return grading_run_execute(run_id=run_id)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def search_run_task(search_id: int) -> dict[str, Any]:
    return search_run_execute(search_id=search_id)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def synthesis_run_task(run_id: int) -> dict[str, Any]:
    return synthesis_run_execute(run_id=run_id)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def synthesis_sweep_task(sweep_id: int) -> dict[str, Any]:
    return sweep_execute(sweep_id=sweep_id)


@shared_task(acks_late=True, reject_on_worker_lost=True, time_limit=600)
def research_watch_task(project_id: int) -> dict[str, Any]:
    """The automatic re-search policy's round after labels arrived (graders/research.py). A
    second delivery finds the search the first started and starts none."""
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return {"project": project_id, "missing": True}
    try:
        decisions = research_on_drift(project)
    except ResearchInvalid as exc:
        logger.warning("automatic re-search in project %s: %s", project.slug, exc)
        return {"project": project_id, "error": str(exc)}
    return {
        "project": project_id,
        "graders": {str(d.grader.pk): d.reason for d in decisions},
        "started": [d.search.pk for d in decisions if d.search is not None],
    }


@shared_task(acks_late=True, reject_on_worker_lost=True, time_limit=600)
def capture_groups_task(groups: list[dict[str, Any]], origin: dict[str, Any]) -> dict[str, int]:
    """Store captured groups a web process sent (graders/capture.py capture_send). A second
    delivery stores no response twice: capture deduplicates by content."""
    return capture_groups_store(groups, origin)


@worker_ready.connect
def jobs_recover(**_: Any) -> None:
    """Send again the searches, synthesis runs, sweeps and grading runs a dead worker left
    running. A broker may hold their messages until a visibility timeout (Redis) or may have
    lost them (the file-system broker), so a starting worker does not wait for it. A search,
    synthesis run or sweep whose holder is alive keeps its lease and the extra message only
    looks again later; a grading run's tasks are claimed by conditional update, so a second
    delivery repeats nothing."""
    from graders.models import GradingRun, SearchRun, SynthesisRun, SynthesisSweep
    from labeling.models import JobStatus

    searches = list(
        SearchRun.objects.filter(job__status=JobStatus.RUNNING).values_list("pk", flat=True)
    )
    runs = list(
        GradingRun.objects.filter(job__status=JobStatus.RUNNING, search__isnull=True).values_list(
            "pk", flat=True
        )
    )
    syntheses = list(
        SynthesisRun.objects.filter(job__status=JobStatus.RUNNING).values_list("pk", flat=True)
    )
    # A sweep's holder keeps its lease like a search's; a dead one's is taken back.
    sweeps = list(
        SynthesisSweep.objects.filter(job__status=JobStatus.RUNNING).values_list("pk", flat=True)
    )
    for pk in sweeps:
        synthesis_sweep_task.delay(pk)
    for pk in searches:
        search_run_task.delay(pk)
    for pk in syntheses:
        synthesis_run_task.delay(pk)
    for pk in runs:
        grading_run_task.delay(pk)
    if searches or runs or syntheses or sweeps:
        logger.info(
            "sent again %d searches, %d synthesis runs, %d sweeps and %d grading runs left running",
            len(searches),
            len(syntheses),
            len(sweeps),
            len(runs),
        )
