"""A project's lineage on one page (DESIGN.md section 12, point 6): label snapshots -> the
searches run on them -> the grader versions they chose (winners, promoted graders and alias
targets, with their parents) -> exports and reward traffic -> captured rollouts -> fresh
labels -> drift -> the next version (a search warm-started from it).

Every figure is read with a fixed number of grouped queries whatever the number of versions;
only drift costs a few queries per grader in use, and it reads the cached summary report
(graders/drift.py, the project home's path), never a full bootstrap.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Min, Q, Sum

from graders.drift import (
    drift_labels,
    drift_report,
    promoted_graders,
    report_warnings,
    selection_searches,
)
from graders.models import (
    AliasMove,
    CapturedGroup,
    GraderAlias,
    GraderExport,
    GraderSelection,
    Metagrader,
    RewardUsage,
    SearchRun,
)
from labeling.models import LabelSnapshot, Project


@dataclass
class Version:
    """One grader version and everything downstream of it."""

    grader: Metagrader
    won: list[SearchRun] = field(default_factory=list)
    selections: list[GraderSelection] = field(default_factory=list)
    snapshot: LabelSnapshot | None = None
    aliases: list[GraderAlias] = field(default_factory=list)
    moves: list[AliasMove] = field(default_factory=list)
    exports: dict[str, Any] = field(default_factory=dict)
    reward: dict[str, Any] = field(default_factory=dict)
    captured_runs: list[dict[str, Any]] = field(default_factory=list)
    fresh_labels: int = 0
    in_use: bool = False
    drift_warnings: list[str] = field(default_factory=list)
    next_searches: list[SearchRun] = field(default_factory=list)

    @property
    def captured_groups(self) -> int:
        return sum(row["groups"] for row in self.captured_runs)


@dataclass
class Lineage:
    snapshots: list[tuple[LabelSnapshot, list[SearchRun]]]
    versions: list[Version]


def project_lineage(*, project: Project) -> Lineage:
    """The project's chain, oldest version first."""
    searches = list(
        SearchRun.objects.filter(project=project)
        .select_related("snapshot", "winner__metagrader")
        .order_by("created_at", "pk")
    )
    selections = list(GraderSelection.objects.filter(project=project).order_by("selected_at", "pk"))
    aliases = list(GraderAlias.objects.filter(project=project).order_by("name"))
    moves = list(
        AliasMove.objects.filter(alias__project=project)
        .select_related("alias", "from_metagrader", "to_metagrader")
        .order_by("moved_at", "pk")
    )
    ids = (
        {s.winner.metagrader_id for s in searches if s.winner}
        | {s.warm_start_id for s in searches if s.warm_start_id}
        | {s.metagrader_id for s in selections}
        | {a.metagrader_id for a in aliases}
    )
    graders = Metagrader.objects.filter(project=project, pk__in=ids).select_related("parent")
    versions = {g.pk: Version(grader=g) for g in graders.order_by("created_at", "pk")}
    for search in searches:
        if search.winner and search.winner.metagrader_id in versions:
            versions[search.winner.metagrader_id].won.append(search)
        if search.warm_start_id in versions:
            versions[search.warm_start_id].next_searches.append(search)
    for selection in selections:
        versions[selection.metagrader_id].selections.append(selection)
    for alias in aliases:
        versions[alias.metagrader_id].aliases.append(alias)
    for move in moves:
        if move.to_metagrader_id in versions:
            versions[move.to_metagrader_id].moves.append(move)
    chosen_by = selection_searches(list(versions))
    for pk, version in versions.items():
        search = chosen_by[pk]
        version.snapshot = search.snapshot if search else None
    _add_traffic(versions)
    _add_fresh_labels(project, versions)
    _add_drift(project, versions)
    return Lineage(snapshots=_snapshots(project, searches), versions=list(versions.values()))


def _snapshots(
    project: Project, searches: list[SearchRun]
) -> list[tuple[LabelSnapshot, list[SearchRun]]]:
    by_snapshot: dict[int, list[SearchRun]] = {}
    for search in searches:
        if search.snapshot_id is not None:
            by_snapshot.setdefault(search.snapshot_id, []).append(search)
    snapshots = LabelSnapshot.objects.filter(project=project).order_by("created_at", "pk")
    return [(snapshot, by_snapshot.get(snapshot.pk, [])) for snapshot in snapshots]


def _add_traffic(versions: dict[int, Version]) -> None:
    """Exports, reward calls and captured groups per version, one grouped query each."""
    ids = list(versions)
    exports = (
        GraderExport.objects.filter(metagrader_id__in=ids)
        .values("metagrader_id")
        .annotate(count=Count("pk"), first=Min("created_at"), last=Max("created_at"))
        .order_by()
    )
    for row in exports:
        versions[row["metagrader_id"]].exports = row
    usage = (
        RewardUsage.objects.filter(metagrader_id__in=ids)
        .values("metagrader_id")
        .annotate(
            tokens=Count("token_id", distinct=True),
            requests=Sum("requests"),
            responses=Sum("responses"),
            first=Min("first_at"),
            last=Max("last_at"),
        )
        .order_by()
    )
    for row in usage:
        versions[row["metagrader_id"]].reward = row
    groups = (
        CapturedGroup.objects.filter(metagrader_id__in=ids)
        .values("metagrader_id", "run")
        .annotate(groups=Count("pk"), first_step=Min("step"), last_step=Max("step"))
        .order_by("metagrader_id", "run")
    )
    for row in groups:
        versions[row["metagrader_id"]].captured_runs.append(row)


def _add_fresh_labels(project: Project, versions: dict[int, Version]) -> None:
    """Human overall labels newer than each version's snapshot (drift's fresh labels), counted
    in one query; a version without a snapshot counts every current label."""
    if not versions:
        return
    since: dict[int, datetime | None] = {
        pk: v.snapshot.created_at if v.snapshot else None for pk, v in versions.items()
    }
    counts = drift_labels(project).aggregate(
        **{
            f"v{pk}": Count("pk", filter=Q(created_at__gt=at) if at else Q())
            for pk, at in since.items()
        }
    )
    for pk, version in versions.items():
        version.fresh_labels = counts[f"v{pk}"]


def _add_drift(project: Project, versions: dict[int, Version]) -> None:
    """The alert and reward-hacking signal of each grader in use, from the summary report."""
    for grader in promoted_graders(project=project):
        version = versions.get(grader.pk)
        if version is not None:
            version.in_use = True
            version.drift_warnings = report_warnings(drift_report(grader=grader, summary=True))
