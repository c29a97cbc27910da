"""Evaluating grades against expert data with the exact metrics of DESIGN.md section 7, and
meta-evaluating judges on labeled pairs (PADME)."""

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db.models import QuerySet

from graders.engine.active.estimators import ipw_mean
from graders.engine.metrics import (
    EvaluatorRuns,
    RankingPairs,
    ScoredResponses,
    evaluator_report,
    harm_aware_accuracy,
    harm_aware_accuracy_ci,
    ranking_accuracy,
    ranking_accuracy_ci,
    ranking_pairs_from_scores,
    tolerant_credit_by_task,
    tolerant_ranking_accuracy,
    tolerant_ranking_accuracy_ci,
    within_task_spearman,
    within_task_spearman_ci,
)
from graders.engine.rank_correlation import EXACT_MAX_N, holm, spearman
from graders.models import Grade, GradingRun
from labeling.agreement_stats import NO_DIMENSION, Category, majority_vote
from labeling.models import JudgeScore, Preference, Project, Score, ScoreProvider, Split, Task

PAIRWISE_KINDS = {"pairwise", "pairwise_rubric"}


def _with_ci(value: float, ci: Any, tasks: int) -> dict[str, Any]:
    """A metric with its task-bootstrap interval; none ("ci": None) over a single task, where
    every resample is that task and the interval would be a point that reads as certainty."""
    return {"value": value, "ci": [ci.low, ci.high] if tasks > 1 else None}


def metric_text(metric: dict[str, Any]) -> str:
    """ "0.750 [0.600, 0.900]", or "0.750 (one task: no interval)"."""
    ci = metric.get("ci")
    interval = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "(one task: no interval)"
    return f"{metric['value']:.3f} {interval}"


def _pairs_metrics(pairs: RankingPairs, tol: float) -> dict[str, Any]:
    tasks = len(set(pairs.task.tolist()))
    metrics: dict[str, Any] = {
        "pairs": len(pairs.task),
        "tasks": tasks,
        "ranking_accuracy": _with_ci(ranking_accuracy(pairs), ranking_accuracy_ci(pairs), tasks),
        "tolerant_ranking_accuracy": _with_ci(
            tolerant_ranking_accuracy(pairs, tol=tol),
            tolerant_ranking_accuracy_ci(pairs, tol=tol),
            tasks,
        ),
        "tolerance": tol,
    }
    if pairs.advantage_sign_lost is not None:
        metrics["harm_aware_accuracy"] = _with_ci(
            harm_aware_accuracy(pairs), harm_aware_accuracy_ci(pairs), tasks
        )
    return metrics


def _reference_scores(response_pks: list[int]) -> tuple[str, dict[int, float]] | None:
    for provider in (ScoreProvider.TRUE_GRADER, ScoreProvider.EXPERT):
        scores = dict(
            Score.objects.filter(response_id__in=response_pks, provider=provider).values_list(
                "response_id", "value"
            )
        )
        if scores:
            return str(provider), scores
    return None


def majority_oriented(
    rows: Iterable[tuple[int, int, str, Any]],
) -> dict[Any, tuple[int, int]]:
    """(response a, response b, choice, group) rows -> for each (group, pair) whose labels have a
    non-tie strict majority, the pair oriented winner first. Several labels of one pair (people,
    generators) count once, by their majority; ties count as votes."""
    votes: dict[tuple[Any, int, int], list[Category]] = defaultdict(list)
    for a, b, choice, group in rows:
        low, high = sorted((a, b))
        winner = {"a": a, "b": b}.get(choice)
        votes[(group, low, high)].append(
            "tie" if winner is None else ("first" if winner == low else "second")
        )
    oriented: dict[Any, tuple[int, int]] = {}
    for (group, low, high), categories in votes.items():
        majority = majority_vote(categories)
        if majority in ("first", "second"):
            oriented[(group, low, high)] = (low, high) if majority == "first" else (high, low)
    return oriented


def _human_overall(response_pks: set[int]) -> QuerySet[Preference]:
    # Overall preferences only: a label on a dimension answers a different question.
    return Preference.objects.filter(
        is_current=True,
        provider="human",
        dimension__isnull=True,
        response_a_id__in=response_pks,
        response_b_id__in=response_pks,
    )


def _human_majority(response_pks: set[int]) -> list[tuple[int, int]]:
    """Human-majority non-tie overall pairs among these responses, winner first."""
    rows = _human_overall(response_pks).values_list(
        "response_a_id", "response_b_id", "choice", "dimension_id"
    )
    return list(majority_oriented(rows).values())


def _oriented_pairs(
    oriented: list[tuple[int, int]], rewards: dict[int, float | None], task_of: dict[int, int]
) -> RankingPairs:
    def score(pk: int) -> float:
        value = rewards.get(pk)
        return np.nan if value is None else value

    return RankingPairs(
        task=np.array([task_of[w] for w, _ in oriented], dtype=np.int64),
        winner_score=np.array([score(w) for w, _ in oriented], dtype=np.float64),
        loser_score=np.array([score(loser) for _, loser in oriented], dtype=np.float64),
    )


def grading_evaluate(*, run: GradingRun) -> dict[str, Any]:
    """Agreement of a run's rewards with the experts: against true-grader (or expert) scores
    when the graded responses have them, else against human-majority preferences; overall and
    per task domain, each domain marked held out when no task of it is in D_meta or
    D_selection (so nothing the search saw came from it). On D_selection, "by_task" keeps
    each task's tolerant credit sum and pair count, {task id: [credit, pairs]}, from which
    a search's selection rule computes accuracy on part of the tasks (graders/candidates.py)."""
    rows = list(
        Grade.objects.filter(run=run).values_list(
            "response_id", "response__task_id", "response__task__domain", "reward"
        )
    )
    rewards = {pk: reward for pk, _, _, reward in rows}
    task_of = {pk: task for pk, task, _, _ in rows}
    tol = 0.0 if run.metagrader.kind in PAIRWISE_KINDS else 0.1
    summary = _rewards_evaluate(rewards, task_of, tol, by_task=run.split == Split.SELECTION)
    domains = sorted({domain for _, _, domain, _ in rows})
    if len(domains) > 1:
        seen = set(
            Task.objects.filter(
                project_id=run.project_id, split__in=[Split.META, Split.SELECTION]
            ).values_list("domain", flat=True)
        )
        summary["by_domain"] = [
            {
                "domain": domain,
                "held_out": domain not in seen,
                **_rewards_evaluate({pk: r for pk, _, d, r in rows if d == domain}, task_of, tol),
            }
            for domain in domains
        ]
    return summary


def _rewards_evaluate(
    rewards: dict[int, float | None], task_of: dict[int, int], tol: float, by_task: bool = False
) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "graded": len(rewards),
        "failed": sum(1 for reward in rewards.values() if reward is None),
    }
    found = reference_pairs(rewards, task_of)
    if found is None:
        return summary | {
            "reference": None,
            "note": "no expert scores or preferences to compare with",
        }
    reference, pairs, responses = found
    if len(pairs.task) == 0:
        return summary | {"reference": reference, "note": "no pairs with different true scores"}
    summary |= {"reference": reference, **_pairs_metrics(pairs, tol)}
    if reference == PREFERENCES_REFERENCE:
        reweighted = preference_reweighted(rewards, task_of, tol)
        if reweighted is not None:
            summary["reweighted"] = reweighted
    if by_task:
        tasks, credit, counts = tolerant_credit_by_task(pairs, tol=tol)
        summary["by_task"] = {
            str(task): [earned, count]
            for task, earned, count in zip(
                tasks.tolist(), credit.tolist(), counts.tolist(), strict=True
            )
        }
    if responses is not None:
        try:
            summary["within_task_spearman"] = _with_ci(
                within_task_spearman(responses),
                within_task_spearman_ci(responses),
                len(set(responses.task.tolist())),
            )
        except ValueError:
            summary["within_task_spearman"] = None
    return summary


def reference_pairs(
    rewards: dict[int, float | None], task_of: dict[int, int]
) -> tuple[str, RankingPairs, ScoredResponses | None] | None:
    """What the experts said about these graded responses, as ranking pairs with the rewards
    attached. Scores come first: true-grader scores if any response has them, else expert
    scores; pairs of two scored responses of a task are ordered by them. Human-majority
    overall preferences add the pairs that scores do not cover (one response has no score: a
    rollout captured from training and labeled since, say), so fresh preferences count on a
    split that also carries scores; the reference is then "<provider>+preferences", and
    harm-aware accuracy, which needs true scores on both sides, is left out. Without scores,
    the preferences alone (then without per-response scores). None when the experts said
    nothing about these responses."""
    oriented = _human_majority(set(rewards))
    reference = _reference_scores(list(rewards))
    if reference is None:
        if not oriented:
            return None
        return PREFERENCES_REFERENCE, _oriented_pairs(oriented, rewards, task_of), None
    provider, truth = reference
    scored = [pk for pk in rewards if pk in truth]
    responses = ScoredResponses(
        task=np.array([task_of[pk] for pk in scored], dtype=np.int64),
        true=np.array([truth[pk] for pk in scored], dtype=np.float64),
        pred=np.array(
            [np.nan if rewards[pk] is None else rewards[pk] for pk in scored], dtype=np.float64
        ),
    )
    pairs = ranking_pairs_from_scores(responses)
    uncovered = [(w, loser) for w, loser in oriented if not (w in truth and loser in truth)]
    if not uncovered:
        return provider, pairs, responses
    added = _oriented_pairs(uncovered, rewards, task_of)
    joined = RankingPairs(
        task=np.concatenate([pairs.task, added.task]),
        winner_score=np.concatenate([pairs.winner_score, added.winner_score]),
        loser_score=np.concatenate([pairs.loser_score, added.loser_score]),
    )
    return f"{provider}+preferences", joined, responses


PREFERENCES_REFERENCE = "human_preferences"


REWEIGHTED_ESTIMATOR = "self-normalized inverse propensity"


def preference_reweighted(
    rewards: dict[int, float | None], task_of: dict[int, int], tol: float
) -> dict[str, Any] | None:
    """Ranking accuracies over the human-majority pairs reweighted for how the queue chose
    them: a pair served by a sampling strategy counts w = 1 / (pool * probability), the chance
    of its first served label (the oldest current one; a revision keeps the chance of the
    label it replaces), every other pair w = 1, and each accuracy is sum(w * credit) / sum(w)
    (ipw_mean). None when no pair was chosen actively: the plain figures are then unbiased."""
    rows = list(
        _human_overall(set(rewards))
        .order_by("created_at", "pk")
        .values_list(
            "response_a_id", "response_b_id", "choice", "dimension_id",
            "selection_probability", "selection_pool",
        )
    )  # fmt: skip
    chances: dict[tuple[int, int], tuple[float | None, int | None]] = {}
    for a, b, _, _, probability, pool in rows:
        chances.setdefault((min(a, b), max(a, b)), (probability, pool))
    oriented = list(majority_oriented(row[:4] for row in rows).values())
    chosen = [chances[(min(w, loser), max(w, loser))] for w, loser in oriented]
    # A chance of 0 was a pair served after everything the draw could pick: not a draw.
    probabilities = np.array([p if p else np.nan for p, _ in chosen], dtype=np.float64)
    pools = np.array([np.nan if n is None else n for _, n in chosen], dtype=np.float64)
    active = int((~np.isnan(probabilities)).sum())
    if active == 0:
        return None
    pairs = _oriented_pairs(oriented, rewards, task_of)

    def reweighted(metric: Callable[[RankingPairs], float]) -> float:
        return ipw_mean(_pair_credits(pairs, metric), probabilities, pools)

    return {
        "ranking_accuracy": reweighted(ranking_accuracy),
        "tolerant_ranking_accuracy": reweighted(
            lambda one: tolerant_ranking_accuracy(one, tol=tol)
        ),
        "pairs": len(oriented),
        "active_pairs": active,
        "estimator": REWEIGHTED_ESTIMATOR,
    }


def _pair_credits(
    pairs: RankingPairs, metric: Callable[[RankingPairs], float]
) -> npt.NDArray[np.float64]:
    """Each pair's credit under a pair-mean metric: the metric of the set holding that pair
    alone, so the credit rule stays the engine's."""
    return np.array(
        [
            metric(RankingPairs(pairs.task[i : i + 1], pairs.winner_score[i : i + 1],
                                pairs.loser_score[i : i + 1]))
            for i in range(len(pairs.task))
        ],
        dtype=np.float64,
    )  # fmt: skip


META_EVAL_FIELDS = (
    "pairs", "runs", "accuracy", "accuracy_when_committed", "tie_rate", "leniency", "score_sd",
    "distinct_scores", "stable", "always_tied", "wobbled", "flipped", "failed_runs",
)  # fmt: skip
# The evaluator properties the correlation panel sets against accuracy (PADME Table 4).
CORRELATION_FACTORS = ("tie_rate", "distinct_scores", "leniency")
CORRELATION_METHOD = (
    f"Spearman's rho across evaluators (average ranks for ties); two-sided p exact by "
    f"permutation up to {EXACT_MAX_N} evaluators, else the t approximation with n - 2 degrees "
    "of freedom; p_holm is Holm-Bonferroni over the factors tested"
)


def evaluator_correlations(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Spearman's rho of accuracy against each CORRELATION_FACTORS value across `rows` (one per
    evaluator), with p values; an evaluator without the factor (no emitted score, so no
    leniency) is left out of that factor's n."""
    factors = []
    for factor in CORRELATION_FACTORS:
        paired = [(r["accuracy"], r[factor]) for r in rows if r[factor] is not None]
        result = spearman([a for a, _ in paired], [f for _, f in paired])
        factors.append({"factor": factor, "n": result.n, "rho": result.rho, "p": result.p})
    tested = [f for f in factors if f["p"] is not None]
    for entry, adjusted in zip(tested, holm([f["p"] for f in tested]), strict=True):
        entry["p_holm"] = adjusted
    for entry in factors:
        entry.setdefault("p_holm", None)
    return {"evaluators": len(rows), "method": CORRELATION_METHOD, "factors": factors}


def meta_eval_rows(
    *, project: Project, reference: str = "synthetic", dimension: str | None = None
) -> dict[str, Any]:
    """One row per judge over the pairs the reference provider labeled with a winner, scored
    from imported judge_score records (FORMATS.md), and per judge and dimension when the judge
    scored pairs of more than one dimension."""
    preferences = Preference.objects.filter(
        task__project=project, is_current=True, provider=reference
    )
    if dimension is not None:
        preferences = preferences.filter(dimension__name=dimension)
    labeled: dict[str | None, set[tuple[int, int]]] = defaultdict(set)
    rows = preferences.values_list("response_a_id", "response_b_id", "choice", "dimension__name")
    for (dim, _, _), pair in majority_oriented(rows).items():
        labeled[dim].add(pair)
    scores: dict[tuple[str, str | None], dict[int, dict[int, float | None]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    needed = {pk for pairs in labeled.values() for pair in pairs for pk in pair}
    for judge, dim, run, response, score in JudgeScore.objects.filter(
        response_id__in=needed
    ).values_list("judge", "dimension__name", "run", "response_id", "score"):
        scores[(judge, dim)][run][response] = score

    def scored(judge: str, dim: str | None) -> list[tuple[int, int]]:
        # Only pairs the judge scored at all: a pair it never saw is not a failed call.
        runs = scores.get((judge, dim), {}).values()
        return [
            (w, loser)
            for w, loser in sorted(labeled[dim])
            if any(w in r or loser in r for r in runs)
        ]

    def row(judge: str, dims: list[str | None], dimension: str | None) -> dict[str, Any]:
        # Keys are (dimension, response): a judge scores a response once per dimension, and a
        # pair is read with the scores of its own dimension.
        pairs = [((d, w), (d, loser)) for d in dims for w, loser in scored(judge, d)]
        indices = sorted({i for d in dims for i in scores.get((judge, d), {})})
        runs = [
            {
                key: scores[(judge, key[0])].get(index, {}).get(key[1])
                for pair in pairs
                for key in pair
            }
            for index in indices
        ]
        report = evaluator_report(EvaluatorRuns(pairs=pairs, scores=runs))
        values = {field: getattr(report, field) for field in META_EVAL_FIELDS}
        return {"judge": judge, "dimension": dimension, **values}

    dims = sorted(labeled, key=lambda d: (d is not None, d or ""))
    overall: list[dict[str, Any]] = []
    by_dimension: list[dict[str, Any]] = []
    for judge in sorted({judge for judge, _ in scores}):
        # The dimensions this judge scored labeled pairs on. With one, its pooled row is that
        # dimension's row, so a breakdown would only repeat it (every judge whose scores carry
        # no dimension was listed twice); the breakdown names the no-dimension group "(none)",
        # never None, which in `rows` means "pooled".
        covered = [d for d in dims if scored(judge, d)]
        if not covered:
            continue
        overall.append(row(judge, covered, covered[0] if len(covered) == 1 else None))
        if len(covered) > 1:
            by_dimension += [row(judge, [d], NO_DIMENSION if d is None else d) for d in covered]
    return {
        "reference": reference,
        "rows": overall,
        "by_dimension": by_dimension,
        "correlations": evaluator_correlations(overall),
    }
