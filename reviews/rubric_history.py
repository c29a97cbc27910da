"""A rubric's versions as a reviewer reads them: who saved each and when, what changed against
the version before (criteria added, removed, reworded, reweighted, moved) and the line diff."""

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from labeling.models import Rubric

Items = Sequence[dict[str, Any]]
DiffKind = Literal["added", "removed", "context", "hunk"]


@dataclass(frozen=True)
class DiffLine:
    kind: DiffKind
    text: str


@dataclass(frozen=True)
class VersionView:
    version: int
    editor: str
    created_at: datetime
    changes: list[str]
    diff: list[DiffLine]
    is_current: bool


def rubric_history(*, rubric: Rubric) -> list[VersionView]:
    """Every version, newest first, each compared with the one before it."""
    revisions = list(rubric.revisions.order_by("version"))
    views = []
    previous: Items = []
    for revision in revisions:
        views.append(
            VersionView(
                version=revision.version,
                editor=revision.editor,
                created_at=revision.created_at,
                changes=items_changes(previous, revision.items) if previous else ["First version."],
                diff=items_diff(previous, revision.items) if previous else [],
                is_current=revision.version == rubric.version,
            )
        )
        previous = revision.items
    return views[::-1]


def item_line(item: dict[str, Any]) -> str:
    return f"[{item['id']}] weight {item['weight']:g}: {item['text']}"


def items_diff(before: Items, after: Items) -> list[DiffLine]:
    """A unified diff over one line per criterion; a criterion's text is one line, its line
    breaks shown as ⏎ so a reworded criterion stays one removed and one added line."""
    lines_before = [item_line(i).replace("\n", " ⏎ ") for i in before]
    lines_after = [item_line(i).replace("\n", " ⏎ ") for i in after]
    diff = difflib.unified_diff(lines_before, lines_after, lineterm="", n=1)
    # The first two lines name the files; after them the marker is always the first character.
    kinds: dict[str, DiffKind] = {"+": "added", "-": "removed", " ": "context", "@": "hunk"}
    return [DiffLine(kinds[line[0]], line) for line in list(diff)[2:]]


def items_changes(before: Items, after: Items) -> list[str]:
    """Criterion-level changes in words, by stable criterion id."""
    old = {item["id"]: (n, item) for n, item in enumerate(before)}
    new = {item["id"]: (n, item) for n, item in enumerate(after)}
    changes = [f"Added {key}: {item['text']}" for key, (_, item) in new.items() if key not in old]
    changes += [
        f"Removed {key}: {item['text']}" for key, (_, item) in old.items() if key not in new
    ]
    kept = [key for key in new if key in old]
    for key in kept:
        (_, was), (_, now) = old[key], new[key]
        if was["text"] != now["text"]:
            changes.append(f"Reworded {key}: “{was['text']}” → “{now['text']}”")
        if was["weight"] != now["weight"]:
            changes.append(f"Reweighted {key}: {was['weight']:g} → {now['weight']:g}")
    order_before = [key for key in old if key in new]
    if kept != order_before:
        changes.append("Reordered: " + ", ".join(kept))
    return changes or ["No change to the criteria."]
