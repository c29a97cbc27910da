"""A rubric's items as one list: read them, and replace them with another list as a new
version, keeping experts' criterion grades.

A grade stays on its criterion while the criterion's key stays (a reviewer's edit of the text or
weight keeps it). A criterion that a new version leaves out takes its grades into
RetiredCriterionGrade with its text, and they come back when a later version holds the same
key with the same text again (restoring an earlier version, re-importing the same rubric), so
no edit, regeneration or import deletes what experts said."""

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Max

from labeling.models import (
    CriterionGrade,
    RetiredCriterionGrade,
    Rubric,
    RubricItem,
    RubricRevision,
    Task,
)

_GENERATED_KEY = re.compile(r"c(\d+)")


@dataclass(frozen=True)
class GradesMoved:
    retired: int  # grades set aside with the criteria this version left out
    restored: int  # grades put back on criteria this version holds again


def rubric_items_snapshot(rubric: Rubric) -> list[dict[str, Any]]:
    """The rubric's items in order, in the shape of the import format."""
    return [{"id": i.key, "text": i.text, "weight": i.weight} for i in rubric.items.all()]


def rubric_grades_set_aside(rubric: Rubric) -> list[dict[str, Any]]:
    """The rubric's removed criteria that experts had graded: key, text, the version that
    removed them and how many grades wait for their return."""
    return list(
        RetiredCriterionGrade.objects.filter(rubric=rubric)
        .values("item_key", "item_text")
        .annotate(grades=Count("pk"), removed_in=Max("retired_in_version"))
        .order_by("-removed_in", "item_key")
    )


def rubric_keys_unused(rubric: Rubric, count: int, taken: Iterable[str] = ()) -> list[str]:
    """`count` keys c<n> past every key the rubric has had in any version and every key in
    `taken`, so a new criterion never takes up the grades, current or retired, of an old one."""
    used = set(taken) | {
        item["id"] for items in rubric.revisions.values_list("items", flat=True) for item in items
    }
    used |= set(rubric.items.values_list("key", flat=True))
    numbers = [int(m.group(1)) for key in used if (m := _GENERATED_KEY.fullmatch(key))]
    last = max(numbers, default=0)
    return [f"c{last + n}" for n in range(1, count + 1)]


def rubric_items_replace(
    *, rubric: Rubric, items: list[dict[str, Any]], editor: str
) -> GradesMoved:
    """Make the rubric's items exactly `items` and record them as revision `rubric.version`.
    Call inside a transaction: the grades moved and the items written land together."""
    # Version 1 is a new rubric's first set of items: nothing to keep or bring back yet.
    first = rubric.version == 1
    before = [] if first else list(rubric.items.all())  # prefetched by the JSONL import
    keys = {item["id"] for item in items}
    leaving = [item for item in before if item.key not in keys]
    retired = _grades_retire(rubric, leaving) if leaving else 0
    kept = RubricItem.objects.bulk_create(
        [
            RubricItem(
                rubric=rubric, key=item["id"], text=item["text"], weight=item["weight"], position=n
            )
            for n, item in enumerate(items)
        ],
        update_conflicts=True,
        unique_fields=["rubric", "key"],
        update_fields=["text", "weight", "position"],
    )
    if leaving:
        RubricItem.objects.filter(pk__in=[item.pk for item in leaving]).delete()
    restored = 0 if first else _grades_restore(rubric, kept)
    RubricRevision.objects.create(rubric=rubric, version=rubric.version, items=items, editor=editor)
    return GradesMoved(retired, restored)


def _grades_retire(rubric: Rubric, leaving: list[RubricItem]) -> int:
    texts = {item.pk: (item.key, item.text) for item in leaving}
    grades = CriterionGrade.objects.filter(item_id__in=list(texts))
    retired = RetiredCriterionGrade.objects.bulk_create(
        [
            RetiredCriterionGrade(
                rubric=rubric,
                item_key=texts[grade.item_id][0],
                item_text=texts[grade.item_id][1],
                response_id=grade.response_id,
                annotator_id=grade.annotator_id,
                passed=grade.passed,
                note=grade.note,
                graded_at=grade.created_at,
                retired_in_version=rubric.version,
            )
            for grade in grades
        ]
    )
    return len(retired)


def _grades_restore(rubric: Rubric, kept: list[RubricItem]) -> int:
    """Put set-aside grades back on the criteria that hold their key and text again, with
    the time they were given. One that collides with a grade given on the criterion since
    (same response and annotator) stays set aside: the newer grade stands."""
    by_key = {item.key: item for item in kept}
    matching = RetiredCriterionGrade.objects.filter(rubric=rubric, item_key__in=list(by_key))
    newest: dict[tuple[str, int, int], RetiredCriterionGrade] = {}
    superseded = []
    for grade in matching.order_by("-graded_at", "-pk"):
        if by_key[grade.item_key].text != grade.item_text:
            continue
        slot = (grade.item_key, grade.response_id, grade.annotator_id)
        if slot in newest:
            # An older grade of the same expert on the same criterion and response, set aside
            # again with the newer one: the newer grade replaces it, as a re-grade would.
            superseded.append(grade.pk)
        else:
            newest[slot] = grade
    RetiredCriterionGrade.objects.filter(pk__in=superseded).delete()
    back = list(newest.values())
    if not back:
        return 0
    taken = set(
        CriterionGrade.objects.filter(item__in=[by_key[g.item_key] for g in back]).values_list(
            "response_id", "item_id", "annotator_id"
        )
    )
    back = [
        grade
        for grade in back
        if (grade.response_id, by_key[grade.item_key].pk, grade.annotator_id) not in taken
    ]
    # A restored grade is on a response of the rubric's task, so of the task's project.
    project_id = Task.objects.values_list("project_id", flat=True).get(pk=rubric.task_id)
    restored = CriterionGrade.objects.bulk_create(
        [
            CriterionGrade(
                project_id=project_id,
                response_id=grade.response_id,
                item=by_key[grade.item_key],
                annotator_id=grade.annotator_id,
                passed=grade.passed,
                note=grade.note,
            )
            for grade in back
        ]
    )
    # created_at is auto_now, so the insert stamped it with now: give back the original time.
    for grade, row in zip(back, restored, strict=True):
        row.created_at = grade.graded_at
    CriterionGrade.objects.bulk_update(restored, ["created_at"])
    RetiredCriterionGrade.objects.filter(pk__in=[grade.pk for grade in back]).delete()
    return len(back)
