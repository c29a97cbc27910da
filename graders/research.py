"""Re-search (DESIGN.md section 12, step 4): a search on the current label snapshot,
warm-started from the grader in use, so the old grader competes on the new labels beside
proposals bred from it, and its page says whether the new winner beats it.

Started by a person (one click from a drift alert) or by the project's policy, which needs a
budget since nobody watches what it spends, and never runs two re-searches of one grader at
once. The policy runs after labels arrive (research_watch_soon, a debounced task): a drift
alert starts one re-search, and no second one on the same labels (research_on_drift)."""

from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.db.models import Max, Q

from graders.drift import drift_labels, drift_report, grader_selection, promoted_graders
from graders.models import (
    Candidate,
    CandidateStatus,
    GraderSelection,
    JudgeEndpoint,
    Metagrader,
    SearchMode,
    SearchRun,
)
from graders.search import SearchInvalid, search_start
from labeling.models import Job, Project

# Without a search behind the grader (imported, written by hand, promoted directly).
DEFAULT_MODE, DEFAULT_N = SearchMode.BEST_OF_N, 4
NO_SEARCH_NOTE = (
    "the current grader has no search behind it: default settings (best-of-N, N = 4) with "
    "the project's default judge"
)


class ResearchInvalid(ValueError):
    pass


@dataclass(frozen=True)
class Standing:
    """One grader's tolerant ranking accuracy on a search's D_selection, with its interval."""

    name: str
    value: float | None
    ci: tuple[float, float] | None


@dataclass(frozen=True)
class Comparison:
    """New against old on the re-search's D_selection. `better`: the new grader is another
    program and its accuracy is higher; `separated`: their intervals do not overlap, so the
    difference is more than the labels' noise."""

    old: Standing
    new: Standing
    same: bool
    better: bool
    separated: bool


def won_search(grader: Metagrader) -> SearchRun | None:
    """The newest search the grader won or was promoted from."""
    promoted_from = GraderSelection.objects.filter(metagrader=grader, search__isnull=False)
    return (
        SearchRun.objects.filter(project_id=grader.project_id)
        .filter(Q(winner__metagrader=grader) | Q(pk__in=promoted_from.values("search")))
        .select_related("endpoint", "proposer")
        .order_by("-created_at", "-pk")
        .first()
    )


def research_start(
    *,
    project: Project,
    grader: Metagrader,
    user: Any = None,
    max_calls: int | None = None,
    max_cost: float | None = None,
) -> SearchRun:
    """Start a re-search of `grader` with the settings of the search it won (or the defaults,
    and a note saying so). Raises ResearchInvalid, or SearchInvalid for settings the current
    labels no longer allow."""
    if grader.project_id != project.pk:
        raise ResearchInvalid("the grader must belong to this project")
    source = won_search(grader)
    if source is None:
        endpoint = (
            JudgeEndpoint.objects.filter(project=project).order_by("-is_default", "pk").first()
        )
        if endpoint is None:
            raise ResearchInvalid("the project has no judge endpoint: add one on the Judges page")
        settings: dict[str, Any] = {"mode": DEFAULT_MODE, "n": DEFAULT_N, "endpoint": endpoint}
        note = NO_SEARCH_NOTE
    else:
        settings = {
            "mode": source.mode,
            "n": source.n,
            "iterations": source.iterations,
            "k": source.k,
            "seed": source.seed,
            "endpoint": source.endpoint,
            "proposer": source.proposer,
            # A rule the source fell back to is the default's fallback, not a choice to copy.
            "selection_rule": None if source.selection_note else source.selection_rule,
        }
        note = ""
    return search_start(
        project=project,
        kind=grader.kind,
        user=user,
        max_calls=max_calls,
        max_cost=max_cost,
        warm_start=grader,
        warm_start_note=note,
        **settings,
    )


def research_maybe_start(project: Project, grader: Metagrader) -> SearchRun | None:
    """The policy (a drift alert calls it): start a re-search within the project's budget when
    research_auto is on and no re-search of this grader is queued or running; else None.
    Raises ResearchInvalid when the policy is on without a budget."""
    if not project.research_auto:
        return None
    if project.research_max_calls is None and project.research_max_cost is None:
        raise ResearchInvalid(
            "automatic re-search needs a budget: set research_max_calls or research_max_cost"
        )
    with transaction.atomic():
        # Serialises two alerts for one grader (a no-op on SQLite, whose writes are serial).
        Metagrader.objects.select_for_update().filter(pk=grader.pk).first()
        if SearchRun.objects.filter(warm_start=grader, job__status__in=Job.ACTIVE).exists():
            return None
        try:
            return research_start(
                project=project,
                grader=grader,
                max_calls=project.research_max_calls,
                max_cost=project.research_max_cost,
            )
        except SearchInvalid as exc:
            raise ResearchInvalid(f"cannot re-search {grader.name}: {exc}") from exc


# Labels arriving within this many seconds of one another are looked at by one policy round.
WATCH_DELAY_S = 10


@dataclass(frozen=True)
class DriftResearch:
    """What the policy did about one promoted grader: the search it started, or why none."""

    grader: Metagrader
    search: SearchRun | None
    reason: str


def research_watch_soon(project: Project) -> bool:
    """Run the policy's round (research_on_drift) in the background a few seconds after this
    transaction commits, once for the labels of that interval. Nothing when the policy is off.
    Returns whether this call enqueued the round."""
    from graders.tasks import research_watch_task

    if not project.research_auto or not cache.add(f"research-watch:{project.pk}", 1, WATCH_DELAY_S):
        return False
    research_watch_task.apply_async_on_commit((project.pk,), countdown=WATCH_DELAY_S)
    return True


def research_on_drift(project: Project) -> list[DriftResearch]:
    """The policy's round: for each promoted grader whose drift alert is raised, start a
    re-search within the project's budget (research_maybe_start), unless one warm-started
    from it was created after the newest fresh label: that one already saw every label
    behind the alert, and repeating it would spend the budget on the same evidence. A new
    label re-arms it. Raises ResearchInvalid like research_maybe_start."""
    if not project.research_auto:
        return []
    decisions = []
    for grader in promoted_graders(project=project):
        if not drift_report(grader=grader, summary=True)["alert"]:
            decisions.append(DriftResearch(grader, None, "no drift alert"))
            continue
        newest = _newest_fresh_label(grader)
        if SearchRun.objects.filter(warm_start=grader, created_at__gte=newest).exists():
            reason = "re-searched since the newest fresh label"
            decisions.append(DriftResearch(grader, None, reason))
            continue
        search = research_maybe_start(project, grader)
        reason = "started" if search else "a re-search of this grader is queued or running"
        decisions.append(DriftResearch(grader, search, reason))
    return decisions


def _newest_fresh_label(grader: Metagrader) -> Any:
    snapshot = grader_selection(grader=grader).snapshot
    fresh = drift_labels(grader.project)
    if snapshot is not None:
        fresh = fresh.filter(created_at__gt=snapshot.created_at)
    return fresh.aggregate(newest=Max("created_at"))["newest"]


def grader_comparison(*, search: SearchRun, old: Metagrader, new: Metagrader) -> Comparison | None:
    """How `new` stands against `old` on the search's D_selection, from their graded
    candidates in it; None unless both were graded there. The seam for other figures of the
    same two graders (drift on fresh labels) to sit beside."""
    candidates = {
        c.metagrader_id: c
        for c in Candidate.objects.filter(
            search=search, metagrader__in=[old, new], status=CandidateStatus.GRADED
        ).select_related("selection_run", "metagrader")
    }
    if old.pk not in candidates or new.pk not in candidates:
        return None
    before, after = _standing(candidates[old.pk]), _standing(candidates[new.pk])
    same = old.pk == new.pk
    better = (
        not same
        and before.value is not None
        and after.value is not None
        and after.value > before.value
    )
    separated = (
        before.ci is not None
        and after.ci is not None
        and (after.ci[0] > before.ci[1] or before.ci[0] > after.ci[1])
    )
    return Comparison(old=before, new=after, same=same, better=better, separated=separated)


def research_comparison(search: SearchRun) -> Comparison | None:
    """A finished re-search's winner against the grader it was warm-started from."""
    if search.warm_start is None or search.winner is None or search.winner.metagrader is None:
        return None
    return grader_comparison(search=search, old=search.warm_start, new=search.winner.metagrader)


def _standing(candidate: Candidate) -> Standing:
    assert candidate.metagrader is not None
    evaluation = candidate.selection_run.evaluation if candidate.selection_run else {}
    metric = evaluation.get("tolerant_ranking_accuracy") or {}
    ci = metric.get("ci")
    return Standing(
        name=candidate.metagrader.name,
        value=metric.get("value"),
        ci=(ci[0], ci[1]) if ci else None,
    )
