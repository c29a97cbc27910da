"""Reviewers' edits of a generated rubric: change, add, delete and move criteria, restore an
earlier version. Every change is a new version with a RubricRevision snapshot. Removing a
criterion sets its experts' grades aside, and a restore that brings it back brings them back
(labeling/rubric_items.py).

Optimistic concurrency: each edit names the version it was made on, and the version is bumped
by a conditional UPDATE (`WHERE version = seen`) in the same transaction as the item writes.
When another save got there first the UPDATE matches no row and RubricConflict is raised with
the rubric as it is now: a save is refused, never silently laid over someone else's."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from labeling.models import Rubric, RubricRevision
from labeling.records import MAX_CRITERION_TEXT, MAX_RUBRIC_ITEMS
from labeling.rubric_items import (
    GradesMoved,
    rubric_items_replace,
    rubric_items_snapshot,
    rubric_keys_unused,
)

MAX_WEIGHT = 1000.0

Items = list[dict[str, Any]]


class CriterionInvalid(ValueError):
    """The edit is refused; `problems` maps a field ("text", "weight" or "" for the whole
    rubric) to a message a reviewer can act on."""

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__("; ".join(problems.values()))
        self.problems = problems


class RubricConflict(Exception):
    """The rubric changed since the edit's version; `rubric` is as it is now, and `item` the
    edited criterion now (None when it no longer exists)."""

    def __init__(self, rubric: Rubric, item: dict[str, Any] | None) -> None:
        super().__init__(f"the rubric is at version {rubric.version} now")
        self.rubric = rubric
        self.item = item


@dataclass(frozen=True)
class RubricChange:
    rubric: Rubric
    changed: bool
    key: str | None  # the criterion the change was about, for the re-check and the page focus
    grades: GradesMoved  # experts' criterion grades set aside or brought back by the change
    # What grading reads changed: a criterion's id, text or weight. A reorder alone changes
    # no prompt (graders.engine.programs.rubric_render) and no reward, so it needs no re-check.
    regrade: bool


def criterion_problems(text: str, weight: float | None) -> dict[str, str]:
    """What is wrong with a criterion's text and weight (the import's limits); empty if fine."""
    problems = {}
    text = text.strip()
    if not text:
        problems["text"] = "Write the criterion: it cannot be empty."
    elif len(text) > MAX_CRITERION_TEXT:
        problems["text"] = (
            f"Keep a criterion within {MAX_CRITERION_TEXT:,} characters; this one has "
            f"{len(text):,}."
        )
    if weight is None or not math.isfinite(weight) or weight <= 0:
        problems["weight"] = "The weight must be a number greater than 0."
    elif weight > MAX_WEIGHT:
        problems["weight"] = f"The weight can be at most {MAX_WEIGHT:g}."
    return problems


def criterion_save(
    *, rubric: Rubric, seen_version: int, key: str | None, text: str, weight: float, editor: str
) -> RubricChange:
    """Change criterion `key`'s text and weight, or add a criterion at the end when `key` is
    None (with a key this rubric never used, so old grades cannot attach to it)."""
    problems = criterion_problems(text, weight)
    if problems:
        raise CriterionInvalid(problems)
    text = text.strip()
    new_key = key or rubric_keys_unused(rubric, 1)[0]

    def change(items: Items) -> Items:
        if key is None:
            if len(items) >= MAX_RUBRIC_ITEMS:
                raise CriterionInvalid({"": f"A rubric holds at most {MAX_RUBRIC_ITEMS} criteria."})
            return [*items, {"id": new_key, "text": text, "weight": weight}]
        _position(items, key)
        return [
            {**item, "text": text, "weight": weight} if item["id"] == key else item
            for item in items
        ]

    return _rubric_change(rubric, seen_version, editor, new_key, change)


def criterion_delete(*, rubric: Rubric, seen_version: int, key: str, editor: str) -> RubricChange:
    """Remove a criterion (its expert grades are set aside, see labeling/rubric_items.py); the
    last one stays, since a rubric without criteria grades nothing."""

    def change(items: Items) -> Items:
        _position(items, key)
        if len(items) == 1:
            raise CriterionInvalid({"": "A rubric needs at least one criterion."})
        return [item for item in items if item["id"] != key]

    return _rubric_change(rubric, seen_version, editor, key, change)


def criterion_move(
    *, rubric: Rubric, seen_version: int, key: str, offset: int, editor: str
) -> RubricChange:
    """Move a criterion `offset` places (-1 up, +1 down); at either end nothing changes."""

    def change(items: Items) -> Items:
        at = _position(items, key)
        to = min(max(at + offset, 0), len(items) - 1)
        moved = list(items)
        moved.insert(to, moved.pop(at))
        return moved

    return _rubric_change(rubric, seen_version, editor, key, change)


def rubric_restore(*, rubric: Rubric, seen_version: int, version: int, editor: str) -> RubricChange:
    """Make the items of `version` current again, as a new version (history is never cut)."""
    snapshot = RubricRevision.objects.filter(rubric=rubric, version=version).first()
    if snapshot is None:
        raise CriterionInvalid({"": f"Version {version} of this rubric does not exist."})
    items = [dict(item) for item in snapshot.items]
    return _rubric_change(rubric, seen_version, editor, None, lambda current: items)


def _position(items: Items, key: str) -> int:
    for at, item in enumerate(items):
        if item["id"] == key:
            return at
    raise CriterionInvalid({"": "This criterion is no longer in the rubric."})


def _graded(items: Items) -> list[tuple[str, str, float]]:
    """What grading reads of a rubric's items, whatever their order."""
    return sorted((item["id"], item["text"], float(item["weight"])) for item in items)


class _Unchanged(Exception):
    pass


def _rubric_change(
    rubric: Rubric,
    seen_version: int,
    editor: str,
    key: str | None,
    change: Callable[[Items], Items],
) -> RubricChange:
    try:
        with transaction.atomic():
            bumped = Rubric.objects.filter(pk=rubric.pk, version=seen_version).update(
                version=seen_version + 1, updated_at=timezone.now()
            )
            if bumped == 1:
                current = Rubric.objects.get(pk=rubric.pk)
                before = rubric_items_snapshot(current)
                after = change(before)
                if after == before:
                    raise _Unchanged  # rolls the version bump back
                moved = rubric_items_replace(rubric=current, items=after, editor=editor)
                return RubricChange(current, True, key, moved, _graded(after) != _graded(before))
    except _Unchanged:
        unchanged = Rubric.objects.get(pk=rubric.pk)
        return RubricChange(unchanged, False, key, GradesMoved(0, 0), regrade=False)
    now = Rubric.objects.get(pk=rubric.pk)
    item = next((i for i in rubric_items_snapshot(now) if i["id"] == key), None)
    raise RubricConflict(now, item)
