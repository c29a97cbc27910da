"""The search page's "Which grader wins" panel (issue 15, item 5): P(best) per candidate, how
many more labels the question needs at the current rate of information, and whether the
labeling queue follows this search."""

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from django.utils.safestring import SafeString

from graders.active.committee import Committee, committee_build, committee_search
from graders.active.strategy import NAME, WhichGraderWins
from graders.charts import p_best_bars_svg
from graders.engine.active.posterior import labels_to_decide
from graders.models import Candidate, SearchRun
from labeling.models import Split
from labeling.strategies import CandidatePair

# A candidate whose P(best) reaches this has won (the "passes 0.9").
DECIDED = 0.9
# The rate of information is the mean gain of this many pairs the queue would serve next.
NEXT_PAIRS = 10

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
    followed: SearchRun | None  # the search the "Which grader wins" queue follows
    strategy_chosen: bool  # the project's queue runs "Which grader wins"

    @property
    def leader(self) -> Chance:
        return max(self.chances, key=lambda chance: chance.p_best)

    @property
    def uniform(self) -> bool:
        """No label separates the candidates yet, so P(best) is the prior's."""
        return self.separating == 0


def which_wins_panel(*, search: SearchRun) -> WhichWinsPanel | None:
    """The panel of a search, or None when fewer than two of its candidates are graded."""
    committee = committee_build(search)
    if committee is None:
        return None
    top = float(committee.p_best.max())
    unlabeled = committee.unlabeled_pairs()
    gain = None if top >= DECIDED or not unlabeled else next_gain(committee, unlabeled)
    needed = None if gain is None else labels_to_decide(committee.p_best, gain, threshold=DECIDED)
    outlook: Outlook = (
        "decided"
        if top >= DECIDED
        else "exhausted"
        if not unlabeled
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
        followed=committee_search(search.project),
        strategy_chosen=search.project.queue_strategy == NAME,
    )


def next_gain(committee: Committee, unlabeled: list[tuple[int, int]]) -> float:
    """The mean information gain of the NEXT_PAIRS pairs a "Which grader wins" draw over the
    committee's unlabeled pairs serves first (at the project's random share, seed 0): the
    current rate of information per label. The queue also holds other splits' pairs, worth
    nothing here, so the real rate is a little lower by the random share they take."""
    pairs = [CandidatePair(committee.task_of[a], Split.SELECTION, "", a, b) for a, b in unlabeled]
    strategy = WhichGraderWins(committee, epsilon=committee.search.project.queue_epsilon)
    priorities = np.array([rank.priority for rank in strategy.rank(pairs)])
    served = np.argsort(-priorities, kind="stable")[:NEXT_PAIRS]
    # A pair's gain depends on the posterior and its own votes only, so the served pairs'
    # values are those of the whole draw, at a fraction of the cost of valuing every pair.
    return float(strategy.values([pairs[i] for i in served]).mean())
