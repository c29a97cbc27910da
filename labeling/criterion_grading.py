"""Experts grading a response criterion by criterion against the task's expert rubric."""

from dataclasses import dataclass

from django.db import transaction

from labeling.models import Annotator, CriterionGrade, Response, RubricItem


class GradesRejected(ValueError):
    pass


@dataclass(frozen=True)
class ItemMark:
    item_id: int
    passed: bool
    note: str = ""


def criterion_grades_submit(
    *, response: Response, annotator: Annotator, marks: list[ItemMark]
) -> int:
    """Store one pass/fail mark (and optional note) per expert rubric item; every item must be
    marked. Submitting again replaces the annotator's marks. Returns the number stored."""
    items = set(
        RubricItem.objects.filter(
            rubric__task_id=response.task_id, rubric__author_kind="expert", rubric__origin=""
        ).values_list("pk", flat=True)
    )
    given = {mark.item_id for mark in marks}
    if given - items:
        raise GradesRejected("a mark refers to an item that is not in this task's expert rubric")
    if items - given:
        raise GradesRejected(f"{len(items - given)} item(s) not marked yet: mark every item")
    if any(len(mark.note) > 10_000 for mark in marks):
        raise GradesRejected("a note is longer than 10,000 characters")
    with transaction.atomic():
        CriterionGrade.objects.bulk_create(
            [
                CriterionGrade(
                    project_id=response.project_id,
                    response=response,
                    item_id=mark.item_id,
                    annotator=annotator,
                    passed=mark.passed,
                    note=mark.note.strip(),
                )
                for mark in marks
            ],
            update_conflicts=True,
            unique_fields=["response", "item", "annotator"],
            update_fields=["passed", "note"],
        )
    return len(marks)
