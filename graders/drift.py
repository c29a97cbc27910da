"""Drift of a promoted grader on fresh expert labels (DESIGN.md section 12, step 3): gathers
the labels newer than the grader's selection snapshot and the rewards it gave at training time,
and turns graders/engine/drift.py's figures into a JSON-safe report.

- The grader's selection: the search that promoted it (its latest GraderSelection with a
  search), else the latest search it won, else the latest it was a candidate in; the selection
  snapshot is that search's LabelSnapshot and the accuracy at selection its selection run's
  tolerant ranking accuracy (what the search ranked by), with its interval. A grader no search
  ever ranked has no snapshot: every current label is fresh and there is nothing to compare.
- Fresh labels: current human overall preferences (no dimension) created after the snapshot,
  their non-tie majority per pair. A pair is scored when both responses were captured in one
  group graded by this grader (CapturedResponse.reward, a failed grade counting as a miss like
  everywhere in metrics.py); every other fresh pair is "not scored" and listed: scoring it would
  need a grading run.
- The report is cached, keyed by the grader, the parameters and the newest label, capture,
  search and selection ids, so the project home and the grader page read it without
  bootstrapping on every view: anything new changes the key. They ask for a summary (only the
  overall figure bootstrapped) unless the full report is already cached.
"""

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db.models import Max, QuerySet
from django.urls import reverse

from graders.engine.drift import (
    Accuracy,
    CapturedReward,
    Drift,
    FreshPair,
    drift_compute,
)
from graders.evaluation import PAIRWISE_KINDS, majority_oriented
from graders.models import (
    Candidate,
    CapturedResponse,
    GraderAlias,
    GraderSelection,
    Metagrader,
    SearchRun,
)
from labeling.access import Perm, ProjectAccess
from labeling.models import Annotator, LabelSnapshot, Preference, Project, Provider

DEFAULT_WINDOW_DAYS = 1.0
DEFAULT_STEP_BUCKET = 10
CACHE_SECONDS = 24 * 3600
RUN_NEEDED = (
    "grading these would need a grading run: drift reads only the rewards the grader gave "
    "captured rollouts at training time"
)


class DriftInvalid(ValueError):
    """Bad drift parameters, named."""


@dataclass(frozen=True)
class Selection:
    search: SearchRun | None
    snapshot: LabelSnapshot | None
    accuracy: dict[str, Any] | None


def grader_selection(*, grader: Metagrader) -> Selection:
    """The search that chose the grader, its snapshot and the accuracy the search ranked by."""
    search = selection_searches([grader.pk])[grader.pk]
    if search is None:
        return Selection(None, None, None)
    candidacy = (
        Candidate.objects.filter(search=search, metagrader=grader, selection_run__isnull=False)
        .select_related("selection_run")
        .first()
    )
    evaluation = candidacy.selection_run.evaluation if candidacy and candidacy.selection_run else {}
    return Selection(search, search.snapshot, evaluation.get("tolerant_ranking_accuracy"))


def selection_searches(grader_ids: Collection[int]) -> dict[int, SearchRun | None]:
    """For each grader, the search that chose it, with its snapshot: the latest search that
    promoted it, else the latest it won, else the latest it was a candidate in; None when no
    search ever ranked it. Three queries for any number of graders."""
    wanted = set(grader_ids)
    found: dict[int, SearchRun] = {}
    promoting = GraderSelection.objects.filter(metagrader_id__in=wanted, search__isnull=False)
    for selection in promoting.select_related("search__snapshot").order_by("selected_at", "pk"):
        assert selection.search is not None
        found[selection.metagrader_id] = selection.search  # the latest stays
    rest = wanted - set(found)
    if rest:
        won = SearchRun.objects.filter(winner__metagrader_id__in=rest)
        for search in won.select_related("snapshot", "winner").order_by("created_at", "pk"):
            assert search.winner is not None and search.winner.metagrader_id is not None
            found[search.winner.metagrader_id] = search
    rest = wanted - set(found)
    if rest:
        candidacies = Candidate.objects.filter(metagrader_id__in=rest)
        for candidate in candidacies.select_related("search__snapshot").order_by(
            "search__created_at", "pk"
        ):
            assert candidate.metagrader_id is not None
            found[candidate.metagrader_id] = candidate.search
    return {pk: found.get(pk) for pk in wanted}


def promoted_graders(*, project: Project) -> list[Metagrader]:
    """Graders in use: those an alias points at and each kind's current selection."""
    ids = set(GraderAlias.objects.filter(project=project).values_list("metagrader_id", flat=True))
    kinds = GraderSelection.objects.filter(project=project).order_by().values_list("kind")
    for (kind,) in kinds.distinct():
        current = (
            GraderSelection.objects.filter(project=project, kind=kind)
            .order_by("-version")
            .values_list("metagrader_id", flat=True)
            .first()
        )
        if current is not None:
            ids.add(current)
    return list(Metagrader.objects.filter(pk__in=ids).order_by("pk"))


def drift_report(
    *,
    grader: Metagrader,
    window_days: float = DEFAULT_WINDOW_DAYS,
    step_bucket: int = DEFAULT_STEP_BUCKET,
    summary: bool = False,
) -> dict[str, Any]:
    """The grader's drift report (the shape docs/drift.md documents), from the cache when no
    label, capture, search or selection arrived since it was computed. A summary bootstraps
    only the overall figure (windows and buckets have no intervals): enough for the alert, a
    third of the work; a cached full report serves as a summary too."""
    if not window_days > 0:
        raise DriftInvalid(f"--window-days must be positive, got {window_days}")
    if step_bucket < 1:
        raise DriftInvalid(f"--step-bucket must be at least 1, got {step_bucket}")
    key = _cache_key(grader, window_days, step_bucket)
    report = cache.get(f"{key}:full")
    if report is None and summary:
        report = cache.get(f"{key}:summary")
    if report is None:
        report = _report_compute(
            grader, window_days=window_days, step_bucket=step_bucket, summary=summary
        )
        cache.set(f"{key}:{'summary' if summary else 'full'}", report, CACHE_SECONDS)
    return report


def _cache_key(grader: Metagrader, window_days: float, step_bucket: int) -> str:
    project = grader.project
    # The project's by its few annotators, not its tasks, and read from the end of the primary
    # key: MAX over a join with 100,000 tasks took 26 ms of every home, this takes one.
    newest_label = (
        Preference.objects.filter(annotator__in=Annotator.objects.filter(project=project))
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )
    newest_capture = CapturedResponse.objects.filter(group__project=project).aggregate(n=Max("pk"))[
        "n"
    ]
    # A new search or promotion can change the selection snapshot and value.
    newest_search = SearchRun.objects.filter(project=project).aggregate(n=Max("pk"))["n"]
    newest_selection = GraderSelection.objects.filter(project=project).aggregate(n=Max("pk"))["n"]
    parts = (
        "drift", grader.pk, window_days, step_bucket, project.drift_margin,
        project.drift_min_pairs, newest_label, newest_capture, newest_search, newest_selection,
    )  # fmt: skip
    return ":".join(str(part) for part in parts)


def drift_alerts(access: ProjectAccess) -> list[dict[str, Any]]:
    """The project home's drift alerts, one per warning of a promoted grader (the alert or the
    reward-hacking signal); none for people who may not see graders (experts)."""
    if not access.can(Perm.SEE_SOURCES):
        return []
    return [
        {
            "grader_id": grader.pk,
            "text": f"Drift of grader #{grader.pk} {grader.name}: {text}",
            "url": reverse("drift", args=[access.project.slug, grader.pk]),
        }
        for grader in promoted_graders(project=access.project)
        for text in report_warnings(drift_report(grader=grader, summary=True))
    ]


def grader_drift_warnings(*, grader: Metagrader) -> list[str]:
    """The grader page's drift warnings: those of its default report if it is promoted."""
    if grader not in promoted_graders(project=grader.project):
        return []
    return report_warnings(drift_report(grader=grader, summary=True))


def report_warnings(report: dict[str, Any]) -> list[str]:
    """The alert and the reward-hacking signal in words; empty when neither is raised."""
    warnings = []
    overall, selection = report["overall"], report["selection"]["accuracy"]
    if report["alert"]:
        warnings.append(
            f"Fresh accuracy {overall['value']:.3f} (95% interval up to {overall['ci'][1]:.3f}) "
            f"lies more than {report['margin']:g} below the accuracy at selection "
            f"{selection['value']:.3f}, over {overall['pairs']} fresh pairs."
        )
    if report["hacking"]:
        warnings.append(
            f"Possible reward hacking: mean captured reward rises with step "
            f"(rho {report['reward_rho']:.2f}) while fresh agreement falls "
            f"(rho {report['agreement_rho']:.2f})."
        )
    return warnings


def _report_compute(
    grader: Metagrader, *, window_days: float, step_bucket: int, summary: bool
) -> dict[str, Any]:
    project = grader.project
    selection = grader_selection(grader=grader)
    since = selection.snapshot.created_at if selection.snapshot else None
    oriented, labeled_at = _fresh_majority(project, since)
    captured = list(
        CapturedResponse.objects.filter(group__metagrader=grader).values_list(
            "response_id", "group_id", "reward", "group__step", "task_id"
        )
    )
    member = {pk: (group, reward, step, task) for pk, group, reward, step, task in captured}
    scored: list[FreshPair] = []
    not_scored: list[dict[str, Any]] = []
    for pair_key, (winner, loser) in sorted(oriented.items(), key=lambda item: item[0]):
        w, lo = member.get(winner), member.get(loser)
        if w is None or lo is None or w[0] != lo[0]:
            not_scored.append(
                {
                    "winner": winner,
                    "loser": loser,
                    "reason": "not captured from this grader"
                    if w is None or lo is None
                    else "captured in different groups",
                }
            )
            continue
        scored.append(
            FreshPair(
                task=w[3],
                winner_score=_score(w[1]),
                loser_score=_score(lo[1]),
                labeled_at=labeled_at[pair_key],
                step=w[2],
            )
        )
    tol = 0.0 if grader.kind in PAIRWISE_KINDS else 0.1
    selection_value = selection.accuracy["value"] if selection.accuracy else None
    drift = drift_compute(
        scored,
        [CapturedReward(step, reward) for _, _, reward, step, _ in captured if reward is not None],
        selection_value=selection_value,
        tol=tol,
        window=timedelta(days=window_days),
        bucket_width=step_bucket,
        margin=project.drift_margin,
        min_pairs=project.drift_min_pairs,
        breakdown_intervals=not summary,
    )
    report = _report_json(grader, selection, drift, not_scored, window_days, step_bucket, tol)
    return report | {"summary": summary}


def drift_labels(project: Project) -> QuerySet[Preference]:
    """The labels drift compares a grader with: experts' current overall preferences. Fresh
    ones are those newer than the grader's selection snapshot."""
    return Preference.objects.filter(
        task__project=project, is_current=True, provider=Provider.HUMAN, dimension__isnull=True
    )


def _fresh_majority(
    project: Project, since: datetime | None
) -> tuple[dict[Any, tuple[int, int]], dict[Any, datetime]]:
    """Non-tie majorities of the fresh labels, keyed like majority_oriented, and the time of
    each pair's newest fresh label (when the majority was last settled)."""
    labels = drift_labels(project)
    if since is not None:
        labels = labels.filter(created_at__gt=since)
    rows = list(
        labels.values_list("response_a_id", "response_b_id", "choice", "dimension_id", "created_at")
    )
    newest: dict[Any, datetime] = {}
    for a, b, _, dimension, created in rows:
        key = (dimension, min(a, b), max(a, b))
        newest[key] = max(created, newest.get(key, created))
    return majority_oriented(row[:4] for row in rows), newest


def _score(reward: float | None) -> float:
    return float("nan") if reward is None else reward


def _accuracy_json(accuracy: Accuracy | None) -> dict[str, Any] | None:
    if accuracy is None:
        return None
    return {
        "value": accuracy.value,
        "ci": [accuracy.ci.low, accuracy.ci.high] if accuracy.ci else None,
        "pairs": accuracy.pairs,
        "tasks": accuracy.tasks,
    }


def _report_json(
    grader: Metagrader,
    selection: Selection,
    drift: Drift,
    not_scored: Iterable[dict[str, Any]],
    window_days: float,
    step_bucket: int,
    tol: float,
) -> dict[str, Any]:
    not_scored = list(not_scored)
    return {
        "grader": {"id": grader.pk, "name": grader.name, "kind": grader.kind},
        "selection": {
            "search": selection.search.pk if selection.search else None,
            "snapshot": selection.snapshot.pk if selection.snapshot else None,
            "since": selection.snapshot.created_at.isoformat() if selection.snapshot else None,
            "accuracy": selection.accuracy,
        },
        "metric": "tolerant_ranking_accuracy",
        "tolerance": tol,
        "window_days": window_days,
        "step_bucket": step_bucket,
        "margin": grader.project.drift_margin,
        "min_pairs": grader.project.drift_min_pairs,
        "overall": _accuracy_json(drift.overall),
        "windows": [
            {
                "start": w.start.isoformat(),
                "end": w.end.isoformat(),
                **(_accuracy_json(w.accuracy) or {}),
            }
            for w in drift.windows
        ],
        "buckets": [
            {
                "first_step": b.first_step,
                "last_step": b.last_step,
                "accuracy": _accuracy_json(b.accuracy),
                "mean_reward": b.mean_reward,
                "rewards": b.rewards,
            }
            for b in drift.buckets
        ],
        "alert": drift.alert,
        "reward_rho": drift.reward_rho,
        "agreement_rho": drift.agreement_rho,
        "hacking": drift.hacking,
        "not_scored": {"count": len(not_scored), "pairs": not_scored, "note": RUN_NEEDED},
    }
