"""The search page's "Which grader wins" panel (issue 15, item 5): P(best) per candidate, how
many more labels the question needs at the current rate of information, and whether the
labeling queue follows this search.

The rate of information is read off a draw like the queue's over the unlabeled D_selection
pairs. A large search has hundreds of thousands of them (10k tasks of 10 responses: 450k), too
many to rank on every page view, so the draw runs over a seeded sample of at most RANKED_PAIRS
of them, stratified by task (every task gets an equal share, give or take one pair, so every
task can appear), and the panel says so. With at most RANKED_PAIRS unlabeled pairs the sample
is all of them and the figure is exactly the queue draw's."""

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from django.utils.safestring import SafeString

from graders.active.committee import Committee, committee_build, committee_search
from graders.active.strategy import NAME
from graders.charts import p_best_bars_svg
from graders.engine.active.acquisition import information_gain
from graders.engine.active.posterior import labels_to_decide
from graders.engine.active.sampling import sampling_priorities, selection_probabilities
from graders.engine.active.votes import IntArray
from graders.models import Candidate, SearchRun

# A candidate whose P(best) reaches this has won (the "passes 0.9").
DECIDED = 0.9
# The rate of information is the mean gain of this many pairs the queue would serve next.
NEXT_PAIRS = 10
# The draw behind that rate ranks at most this many unlabeled pairs (a stratified sample): about
# 20 ms of information gain on a 2-core host, where all 450k pairs of the pages bench took 4 s.
RANKED_PAIRS = 20_000

Outlook = Literal["decided", "exhausted", "stuck", "estimate"]


@dataclass(frozen=True)
class Chance:
    candidate: Candidate
    p_best: float


@dataclass(frozen=True)
class WhichWinsPanel:
    """What the panel shows. `outlook`: "decided" (a candidate's P(best) >= DECIDED),
    "exhausted" (no unlabeled pair left), "stuck" (no unlabeled pair the candidates disagree
    on) or "estimate" (`labels_needed` more labels, rounded up)."""

    chances: list[Chance]
    chart: SafeString
    labels: int  # labeled committee pairs with a non-tie majority
    separating: int  # of those, the ones the candidates disagree on
    outlook: Outlook
    labels_needed: int | None
    gain_per_label: float | None
    unlabeled: int  # unlabeled committee pairs
    ranked: int  # of those, the ones the draw behind gain_per_label ranked (<= RANKED_PAIRS)
    followed: SearchRun | None  # the search the "Which grader wins" queue follows
    strategy_chosen: bool  # the project's queue runs "Which grader wins"

    @property
    def leader(self) -> Chance:
        return max(self.chances, key=lambda chance: chance.p_best)

    @property
    def sampled(self) -> bool:
        """The rate of information comes from a sample of the unlabeled pairs."""
        return self.ranked < self.unlabeled

    @property
    def uniform(self) -> bool:
        """No label separates the candidates yet, so P(best) is the prior's."""
        return self.separating == 0


def which_wins_panel(*, search: SearchRun) -> WhichWinsPanel | None:
    """The panel of a search, or None when fewer than two of its candidates are graded."""
    committee = committee_build(search, labeled_everywhere=False)
    if committee is None:
        return None
    top = float(committee.p_best.max())
    rows_a, rows_b = committee.unlabeled_pairs()
    sample = pairs_sample(committee.tasks[rows_a], limit=RANKED_PAIRS, seed=0)
    gain = (
        None
        if top >= DECIDED or not len(rows_a)
        else next_gain(committee, rows_a[sample], rows_b[sample])
    )
    needed = None if gain is None else labels_to_decide(committee.p_best, gain, threshold=DECIDED)
    outlook: Outlook = (
        "decided"
        if top >= DECIDED
        else "exhausted"
        if not len(rows_a)
        else "stuck"
        if needed is None
        else "estimate"
    )
    chances = [
        Chance(member, float(p))
        for member, p in zip(committee.members, committee.p_best, strict=True)
    ]
    return WhichWinsPanel(
        chances=chances,
        chart=p_best_bars_svg(
            [(c.candidate.metagrader.name, c.p_best) for c in chances], threshold=DECIDED
        ),
        labels=len(committee.labels),
        separating=committee.discriminating_labels(),
        outlook=outlook,
        labels_needed=None if needed is None else math.ceil(needed),
        gain_per_label=gain,
        unlabeled=len(rows_a),
        ranked=len(sample),
        followed=committee_search(search.project),
        strategy_chosen=search.project.queue_strategy == NAME,
    )


def next_gain(committee: Committee, rows_a: IntArray, rows_b: IntArray) -> float:
    """The mean information gain of the NEXT_PAIRS pairs that a "Which grader wins" draw over
    the given unlabeled committee pairs (rows of the committee's responses) serves first, at the
    project's random share and seed 0: the current rate of information per label. The draw is
    the queue strategy's (graders/active/draw.py: the same probabilities and priorities, pairs
    given no chance served last, here worth 0 whichever they are), done on arrays. The queue
    also holds other splits' pairs, worth nothing here, so the real rate is a little lower by
    the random share they take."""
    votes = committee.votes_of(rows_a, rows_b)
    q = selection_probabilities(
        information_gain(committee.posterior, votes), epsilon=committee.search.project.queue_epsilon
    )
    priorities = sampling_priorities(q, np.random.default_rng(0))
    served = np.argsort(-priorities, kind="stable")[:NEXT_PAIRS]
    # A pair's gain depends on the posterior and its own votes only; valued again on their own,
    # the served pairs' gains are the queue strategy's values of them to the last bit.
    return float(information_gain(committee.posterior, votes[served]).mean())


def pairs_sample(tasks: IntArray, *, limit: int, seed: int) -> IntArray:
    """Positions of at most `limit` of the pairs whose tasks are `tasks` (pairs of one task
    adjacent), ascending: all of them when there are at most `limit`, else a seeded sample
    stratified by task. Each task gives the same quota of pairs (all it has when it has fewer),
    drawn uniformly among its pairs, and the slots the quota leaves go one each to tasks drawn
    at random among those with pairs left."""
    size = len(tasks)
    if size <= limit:
        return np.arange(size)
    rng = np.random.default_rng(seed)
    starts = np.flatnonzero(np.r_[True, tasks[1:] != tasks[:-1]])
    counts = np.diff(np.r_[starts, size])
    task = np.repeat(np.arange(len(starts)), counts)
    # Each pair's place in a random order of its task's pairs: sorting task + a uniform key
    # keeps the tasks in place and shuffles the pairs within each.
    place = np.empty(size, dtype=np.int64)
    place[np.argsort(task + rng.random(size))] = np.arange(size) - starts[task]
    # The largest quota whose pairs fit, sum(min(count, quota)) <= limit, from the totals of
    # every quota up to the largest count.
    ordered = np.sort(counts)
    quotas = np.arange(int(ordered[-1]) + 1)
    below = np.searchsorted(ordered, quotas)
    totals = np.r_[0, np.cumsum(ordered)][below] + quotas * (len(ordered) - below)
    quota = int(np.searchsorted(totals, limit, side="right")) - 1
    extra = np.zeros(len(starts), dtype=np.bool_)
    extra[rng.permutation(np.flatnonzero(counts > quota))[: limit - int(totals[quota])]] = True
    return np.flatnonzero((place < quota) | ((place == quota) & extra[task]))
