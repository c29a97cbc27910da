"""An annotator's own labels for the My labels page: every pair they labeled through the queue,
newest first, each as they saw it (sides as shown, not as stored) with the assignment that
reopens it for revision. Only the annotator's own rows are read, so nobody else's label can show.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from labeling.models import Annotator, Preference, Project, QueueAssignment
from labeling.selectors import side_shown

LABELS_PER_PAGE = 25


@dataclass(frozen=True)
class MyLabel:
    assignment_id: int
    task_id: str
    prompt: str
    dimension: str | None
    side: str | None  # "left", "right" or "tie" as shown; None if the label is gone
    confidence: int | None
    labeled_at: datetime | None


def my_assignments(
    *, project: Project, annotator: Annotator, task: str = ""
) -> QuerySet[QueueAssignment]:
    """The annotator's labeled assignments in the project, the latest label first (a revision
    counts as new); `task` keeps those whose task id contains it."""
    rows = QueueAssignment.objects.filter(
        annotator=annotator, pair__project=project, submitted_at__isnull=False
    )
    if task:
        rows = rows.filter(pair__task__external_id__icontains=task)
    return rows.select_related("pair__task", "pair__dimension").order_by("-submitted_at", "-pk")


def my_labels_view(assignments: Sequence[QueueAssignment]) -> list[MyLabel]:
    """One page of my_assignments with each one's current label, in one query for the labels."""
    if not assignments:
        return []
    annotator_id = assignments[0].annotator_id
    labels = {
        (*sorted((p.response_a_id, p.response_b_id)), p.dimension_id): p
        for p in Preference.objects.filter(
            annotator_id=annotator_id,
            is_current=True,
            task_id__in={a.pair.task_id for a in assignments},
        ).only("choice", "confidence", "response_a_id", "response_b_id", "dimension_id")
    }
    rows = []
    for assignment in assignments:
        pair = assignment.pair
        label = labels.get((*sorted((pair.response_a_id, pair.response_b_id)), pair.dimension_id))
        left = pair.response_a_id if assignment.slot_order == "ab" else pair.response_b_id
        rows.append(
            MyLabel(
                assignment_id=assignment.pk,
                task_id=pair.task.external_id,
                prompt=pair.task.prompt,
                dimension=pair.dimension.name if pair.dimension else None,
                side=None if label is None else side_shown(label, left_id=left),
                confidence=None if label is None else label.confidence,
                labeled_at=assignment.submitted_at,
            )
        )
    return rows
