"""The committee that "Which grader wins" learns about (DESIGN.md section 8): the top candidates
of a search, their stored rewards on D_selection, and the experts' overall labels, turned into
the engine's posterior over which candidate is best.

Everything is read in a bounded number of queries (the search, its candidates, their selection
runs' grades, the project's overall human labels), never one per pair: the queue's background
refresh ranks every queued pair with one committee.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from django.db.models import Count, Q

from graders.candidates import candidates_ranked
from graders.engine.active.posterior import Posterior, p_best, posterior_from_labels
from graders.engine.active.votes import IntArray, discriminating, pair_votes
from graders.evaluation import PAIRWISE_KINDS, majority_oriented
from graders.models import Candidate, CandidateStatus, Grade, SearchRun
from labeling.models import Preference, Project, Provider

# At most this many of a search's best candidates vote: the question is which of the leaders
# wins, and every further candidate multiplies the vote patterns the information gain integrates.
COMMITTEE_SIZE = 8
# Vote tolerance per kind, as in the tolerant ranking accuracy the search selects by.
SCALAR_TOLERANCE = 0.1

Pair = tuple[int, int]


@dataclass(frozen=True)
class Committee:
    """The voting candidates (best first), each graded response's rewards by candidate (NaN
    where a candidate has none), and the human labels: `labels` the non-tie majority of each
    committee pair (+1 when the lower response id won), `labeled` every pair of the project
    with a current overall human label (a tie or a split vote included), written low id first."""

    search: SearchRun
    members: list[Candidate]
    tolerance: float
    rewards: dict[int, np.ndarray]
    task_of: dict[int, int]
    labels: dict[Pair, int]
    labeled: frozenset[Pair]
    posterior: Posterior
    p_best: np.ndarray

    def votes(self, pairs: Sequence[Pair]) -> IntArray:
        """The members' votes on pairs of graded responses, shape (pairs, members)."""
        return _votes(self.rewards, pairs, len(self.members), self.tolerance)

    def graded(self, a: int, b: int) -> bool:
        return a in self.rewards and b in self.rewards

    def unlabeled_pairs(self) -> list[Pair]:
        """Every same-task pair of graded responses without an overall human label."""
        by_task: dict[int, list[int]] = {}
        for response, task in self.task_of.items():
            by_task.setdefault(task, []).append(response)
        return [
            pair
            for task in sorted(by_task)
            for pair in combinations(sorted(by_task[task]), 2)
            if pair not in self.labeled
        ]

    def discriminating_labels(self) -> int:
        """How many labeled pairs the members disagree on: only those move the posterior."""
        pairs = list(self.labels)
        return int(discriminating(self.votes(pairs)).sum()) if pairs else 0


def _votes(
    rewards: dict[int, np.ndarray], pairs: Sequence[Pair], members: int, tolerance: float
) -> IntArray:
    a = np.array([rewards[x] for x, _ in pairs]).reshape(len(pairs), members)
    b = np.array([rewards[y] for _, y in pairs]).reshape(len(pairs), members)
    return pair_votes(a, b, tol=tolerance)


def committee_search(project: Project) -> SearchRun | None:
    """The project's most recent search with at least two graded candidates."""
    graded = Q(candidates__status=CandidateStatus.GRADED, candidates__score__isnull=False)
    return (
        SearchRun.objects.filter(project=project)
        .annotate(graded=Count("candidates", filter=graded))
        .filter(graded__gte=2)
        .order_by("-created_at", "-pk")
        .first()
    )


def committee_build(search: SearchRun) -> Committee | None:
    """The committee of a search, or None when fewer than two of its candidates are graded."""
    ranked = candidates_ranked(Candidate.objects.filter(search=search).select_related("metagrader"))
    members = [c for c in ranked if c.selection_run_id is not None][:COMMITTEE_SIZE]
    if len(members) < 2:
        return None
    column = {member.selection_run_id: k for k, member in enumerate(members)}
    rewards: dict[int, np.ndarray] = {}
    task_of: dict[int, int] = {}
    for run, response, task, reward in Grade.objects.filter(run_id__in=column).values_list(
        "run_id", "response_id", "response__task_id", "reward"
    ):
        row = rewards.setdefault(response, np.full(len(members), np.nan))
        row[column[run]] = np.nan if reward is None else reward
        task_of[response] = task
    # One read of the project's overall human labels serves both the posterior (the pairs the
    # committee graded) and the queue's pool (a pair of any split with a label has left it).
    rows = list(
        Preference.objects.filter(
            task__project_id=search.project_id,
            is_current=True,
            provider=Provider.HUMAN,
            dimension__isnull=True,
        ).values_list("response_a_id", "response_b_id", "choice", "dimension_id")
    )
    labeled = frozenset((min(a, b), max(a, b)) for a, b, _, _ in rows)
    labels = {
        (low, high): 1 if winner == low else -1
        for (_, low, high), (winner, _) in majority_oriented(
            row for row in rows if row[0] in rewards and row[1] in rewards
        ).items()
    }
    tolerance = 0.0 if search.kind in PAIRWISE_KINDS else SCALAR_TOLERANCE
    pairs = list(labels)
    posterior = posterior_from_labels(
        _votes(rewards, pairs, len(members), tolerance),
        np.array([labels[pair] for pair in pairs], dtype=np.int64),
    )
    return Committee(
        search=search,
        members=members,
        tolerance=tolerance,
        rewards=rewards,
        task_of=task_of,
        labels=labels,
        labeled=labeled,
        posterior=posterior,
        p_best=p_best(posterior),
    )


def committee_for_project(project: Project) -> Committee | None:
    """The committee the project's "Which grader wins" queue follows, if it can run yet."""
    search = committee_search(project)
    return None if search is None else committee_build(search)
