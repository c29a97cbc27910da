"""Label snapshots: a hash of everything experts have said about a project (scores, current
human preferences, criterion grades) and of its splits, taken when a search starts or labels
are exported. Equal labels hash equal, so a snapshot names the labels, not the moment."""

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from labeling.models import (
    CriterionGrade,
    LabelExport,
    LabelSnapshot,
    Preference,
    Project,
    Score,
    ScoreProvider,
    Task,
)

CHUNK = 5000


def _label_rows(project: Project) -> dict[str, Iterable[tuple[Any, ...]]]:
    """Each kind of label as rows of external ids and values, in a fixed order."""
    return {
        "splits": Task.objects.filter(project=project)
        .order_by("external_id")
        .values_list("external_id", "split"),
        "scores": Score.objects.filter(
            response__task__project=project,
            provider__in=[ScoreProvider.TRUE_GRADER, ScoreProvider.EXPERT],
        )
        .order_by("response__external_id", "provider")
        .values_list("response__external_id", "provider", "value"),
        "preferences": Preference.objects.filter(
            task__project=project, is_current=True, provider="human"
        )
        .order_by("response_a__external_id", "response_b__external_id", "annotator__name", "pk")
        .values_list(
            "response_a__external_id",
            "response_b__external_id",
            "dimension__name",
            "annotator__name",
            "choice",
        ),
        "criterion_grades": CriterionGrade.objects.filter(response__task__project=project)
        .order_by("response__external_id", "item__rubric_id", "item__key", "annotator__name")
        .values_list(
            "response__external_id",
            "item__rubric__author_kind",
            "item__rubric__origin",
            "item__key",
            "annotator__name",
            "passed",
        ),
    }


def label_snapshot_take(*, project: Project) -> LabelSnapshot:
    """The snapshot of the project's labels as they are now (an existing row when unchanged)."""
    digest = hashlib.sha256()
    counts: dict[str, int] = {}
    for name, rows in _label_rows(project).items():
        digest.update(f"[{name}]\n".encode())
        count = 0
        for row in rows.iterator(chunk_size=CHUNK):  # type: ignore[attr-defined]
            digest.update(json.dumps(row, separators=(",", ":")).encode() + b"\n")
            count += 1
        counts[name] = count
    snapshot, _ = LabelSnapshot.objects.get_or_create(
        project=project, content_hash=digest.hexdigest(), defaults={"counts": counts}
    )
    return snapshot


def label_export_record(*, project: Project, kind: str, user: Any = None) -> LabelExport:
    """Note an export of labels for training with the snapshot it held. Taken just before the
    records stream, so an edit landing meanwhile can make the file newer than its snapshot;
    the export page says to export again when labels are being edited."""
    return LabelExport.objects.create(
        project=project,
        kind=kind,
        snapshot=label_snapshot_take(project=project),
        user=user if getattr(user, "is_authenticated", False) else None,
    )


def snapshot_header(export: LabelExport) -> str:
    """The X-Label-Snapshot header value: the snapshot id and its content hash."""
    return f"{export.snapshot_id}; sha256={export.snapshot.content_hash}"
