"""The committee that "Which grader wins" learns about (DESIGN.md section 8): the top candidates
of a search, their stored rewards on D_selection, and the experts' overall labels, turned into
the engine's posterior over which candidate is best.

Everything is read in a bounded number of queries (the search, its candidates, a stamp of their
selection runs' grades and, unless cached under that stamp, the grades; the project's overall
human labels), never one per pair: the queue's background
refresh ranks every queued pair with one committee.
"""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Max, Q

from graders.candidates import candidates_ranked
from graders.engine.active.posterior import Posterior, p_best, posterior_from_labels
from graders.engine.active.votes import IntArray, discriminating, pair_votes
from graders.evaluation import PAIRWISE_KINDS, majority_oriented
from graders.models import Candidate, CandidateStatus, Grade, GradingRun, SearchRun
from labeling.models import Preference, Project, Provider

# At most this many of a search's best candidates vote: the question is which of the leaders
# wins, and every further candidate multiplies the vote patterns the information gain integrates.
COMMITTEE_SIZE = 8
# Vote tolerance per kind, as in the tolerant ranking accuracy the search selects by.
SCALAR_TOLERANCE = 0.1
# The members' rewards are cached this long (the key changes with them; see _graded).
GRADED_CACHE_SECONDS = 3600

Pair = tuple[int, int]


@dataclass(frozen=True)
class Committee:
    """The voting candidates (best first), their rewards on the graded responses, and the human
    labels: `labels` the non-tie majority of each committee pair (+1 when the lower response id
    won), `labeled` the pairs with a current overall human label (a tie or a split vote
    included), written low id first: every pair of the project, or with `labeled_everywhere`
    False in committee_build only the pairs of graded responses (all the panel looks at).

    The graded responses are `responses` (ascending ids) with their `tasks`; `rewards` holds
    row i's rewards by candidate (NaN where a candidate has none), `row` maps a response id to
    its row."""

    search: SearchRun
    members: list[Candidate]
    tolerance: float
    responses: IntArray
    tasks: IntArray
    rewards: np.ndarray
    row: dict[int, int]
    labels: dict[Pair, int]
    labeled: frozenset[Pair]
    posterior: Posterior
    p_best: np.ndarray

    def votes(self, pairs: Sequence[Pair]) -> IntArray:
        """The members' votes on pairs of graded responses, shape (pairs, members)."""
        row = self.row
        return self.votes_of(
            np.array([row[a] for a, _ in pairs], dtype=np.int64),
            np.array([row[b] for _, b in pairs], dtype=np.int64),
        )

    def votes_of(self, rows_a: IntArray, rows_b: IntArray) -> IntArray:
        """The members' votes on the pairs of graded responses at rows (rows_a[i], rows_b[i])."""
        return pair_votes(self.rewards[rows_a], self.rewards[rows_b], tol=self.tolerance)

    def graded(self, a: int, b: int) -> bool:
        return a in self.row and b in self.row

    def unlabeled_pairs(self) -> tuple[IntArray, IntArray]:
        """Every same-task pair of graded responses without an overall human label, as the rows
        of its two responses (lower id first), tasks ascending and each task's pairs in
        itertools.combinations order of its ascending response ids."""
        rows_a, rows_b = same_task_pairs(self.tasks)
        if self.labeled:
            found = np.array(
                [
                    (self.row[a], self.row[b])
                    for a, b in self.labeled
                    if a in self.row and b in self.row
                ],
                dtype=np.int64,
            ).reshape(-1, 2)
            size = len(self.responses)
            kept = ~np.isin(rows_a * size + rows_b, found[:, 0] * size + found[:, 1])
            rows_a, rows_b = rows_a[kept], rows_b[kept]
        return rows_a, rows_b

    def discriminating_labels(self) -> int:
        """How many labeled pairs the members disagree on: only those move the posterior."""
        pairs = list(self.labels)
        return int(discriminating(self.votes(pairs)).sum()) if pairs else 0


def same_task_pairs(tasks: IntArray) -> tuple[IntArray, IntArray]:
    """Every pair (i, j), i < j, of positions with one task, for positions in ascending order
    of the ids they stand for: tasks ascending, each task's pairs in combinations order."""
    order = np.argsort(tasks, kind="stable")
    _, starts, counts = np.unique(tasks[order], return_index=True, return_counts=True)
    parts_a, parts_b, parts_at = [], [], []
    for size in np.unique(counts[counts > 1]):
        first, second = np.triu_indices(int(size), k=1)
        group = np.flatnonzero(counts == size)
        offsets = starts[group][:, None]
        parts_a.append(order[offsets + first].reshape(-1))
        parts_b.append(order[offsets + second].reshape(-1))
        parts_at.append(np.repeat(group, len(first)))
    if not parts_a:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    by_task = np.argsort(np.concatenate(parts_at), kind="stable")
    return np.concatenate(parts_a)[by_task], np.concatenate(parts_b)[by_task]


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


def committee_build(search: SearchRun, *, labeled_everywhere: bool = True) -> Committee | None:
    """The committee of a search, or None when fewer than two of its candidates are graded.
    `labeled` covers every labeled pair of the project (the queue's pool spans all splits), or
    with `labeled_everywhere` False only those of graded responses, a much smaller read."""
    ranked = candidates_ranked(Candidate.objects.filter(search=search).select_related("metagrader"))
    members = [c for c in ranked if c.selection_run_id is not None][:COMMITTEE_SIZE]
    if len(members) < 2:
        return None
    runs = [member.selection_run_id for member in members]
    responses, tasks, rewards = _graded(runs)
    row = dict(zip(responses.tolist(), range(len(responses)), strict=True))
    # One read of the human labels serves both the posterior (the pairs the committee graded)
    # and, project-wide, the queue's pool (a pair of any split with a label has left it).
    preferences = Preference.objects.filter(
        task__project_id=search.project_id,
        is_current=True,
        provider=Provider.HUMAN,
        dimension__isnull=True,
    )
    if not labeled_everywhere:
        graded = Grade.objects.filter(run_id__in=runs).values("response_id")
        preferences = preferences.filter(response_a_id__in=graded, response_b_id__in=graded)
    rows = list(preferences.values_list("response_a_id", "response_b_id", "choice", "dimension_id"))
    labeled = frozenset((min(a, b), max(a, b)) for a, b, _, _ in rows)
    labels = {
        (low, high): 1 if winner == low else -1
        for (_, low, high), (winner, _) in majority_oriented(
            label for label in rows if label[0] in row and label[1] in row
        ).items()
    }
    tolerance = 0.0 if search.kind in PAIRWISE_KINDS else SCALAR_TOLERANCE
    pairs = list(labels)
    rows_a = np.array([row[a] for a, _ in pairs], dtype=np.int64)
    rows_b = np.array([row[b] for _, b in pairs], dtype=np.int64)
    posterior = posterior_from_labels(
        pair_votes(rewards[rows_a], rewards[rows_b], tol=tolerance),
        np.array([labels[pair] for pair in pairs], dtype=np.int64),
    )
    return Committee(
        search=search,
        members=members,
        tolerance=tolerance,
        responses=responses,
        tasks=tasks,
        rewards=rewards,
        row=row,
        labels=labels,
        labeled=labeled,
        posterior=posterior,
        p_best=p_best(posterior),
    )


def _graded(runs: list[int]) -> tuple[IntArray, IntArray, np.ndarray]:
    """The responses the runs graded (ascending ids), their tasks, and their rewards by run
    (shape (responses, runs), NaN where a run has no reward).

    Cached under a key that changes whenever the result can: grades are only ever inserted
    (ignore_conflicts, never updated) or deleted, and ids only grow, so a run's grade count and
    newest grade id change with any change to its grades; a response never changes task. The
    runs' creation times keep ids reused after a rollback (SQLite, tests) apart."""
    stamps = (
        GradingRun.objects.filter(pk__in=runs)
        .annotate(grades_count=Count("grades"), newest=Max("grades__id"))
        .order_by("pk")
        .values_list("pk", "created_at", "grades_count", "newest")
    )
    key = "committee-graded:" + hashlib.sha256(repr((runs, list(stamps))).encode()).hexdigest()
    cached: tuple[IntArray, IntArray, np.ndarray] | None = cache.get(key)
    if cached is None:
        cached = _graded_read(runs)
        cache.set(key, cached, GRADED_CACHE_SECONDS)
    return cached


def _graded_read(runs: list[int]) -> tuple[IntArray, IntArray, np.ndarray]:
    """_graded from the database. The rows come straight off the cursor: Django building 100k
    row tuples cost as much again as the query."""
    query = Grade.objects.filter(run_id__in=runs).values_list(
        "run_id", "response_id", "response__task_id", "reward"
    )
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        table = np.array(cursor.fetchall(), dtype=np.float64).reshape(-1, 4)
    responses, row = np.unique(table[:, 1].astype(np.int64), return_inverse=True)
    tasks = np.zeros(len(responses), dtype=np.int64)
    tasks[row] = table[:, 2].astype(np.int64)
    order = np.argsort(runs)
    column = order[np.searchsorted(np.asarray(runs)[order], table[:, 0].astype(np.int64))]
    rewards = np.full((len(responses), len(runs)), np.nan)
    rewards[row, column] = table[:, 3]
    return responses, tasks, rewards


def committee_for_project(project: Project) -> Committee | None:
    """The committee the project's "Which grader wins" queue follows, if it can run yet."""
    search = committee_search(project)
    return None if search is None else committee_build(search)
