"""Writes of "Which grader wins": making it the project's queue strategy and ranking the
queue with it now (the search page's "Label these next")."""

from django.db import transaction

from graders.active.strategy import NAME, WHICH_WINS
from labeling.models import Project, QueuePair
from labeling.queue import queue_build, queue_refresh, refresh_seed


class WhichWinsUnavailable(ValueError):
    pass


@transaction.atomic
def which_wins_queue(*, project: Project) -> int:
    """Make "Which grader wins" the project's queue strategy and write the queue with it at
    once: re-rank the queued pairs when there are any (labels and claims are kept), else queue
    every task's pairs for the overall preference, which is what the committee learns from (the
    Queue page's default). Returns the number of queue rows ranked. Raises WhichWinsUnavailable,
    saying why, when the project has no search with two graded candidates yet."""
    choice = WHICH_WINS.build(project, refresh_seed(project))
    if choice.fallback:
        raise WhichWinsUnavailable(choice.fallback)
    Project.objects.filter(pk=project.pk).update(queue_strategy=NAME)
    project.queue_strategy = NAME
    # Pinned pairs (a synthesis validation's) keep their own order: only the others count.
    if QueuePair.objects.filter(project=project, overlap__isnull=True).exists():
        return queue_refresh(project=project, strategy=choice.strategy)
    return queue_build(project=project, strategy=choice.strategy, dimensions=[None])
