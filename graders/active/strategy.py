"""The "Which grader wins" queue strategy (DESIGN.md section 8): serve the pairs whose label
tells most about which of a search's top candidates is best, as a random draw that records each
pair's chance so that accuracies measured on the labels can be reweighted.

The pool is the queued pairs without an overall human label, of every split. A D_selection pair
the committee graded is worth its expected information gain about P(best); every other pool pair
is worth 0 and is reached only through the project's uniformly random share (queue_epsilon).
Pairs outside the pool (labeled already, and with epsilon 0 the ones the draw gives no chance)
follow every drawn pair in a seeded random order and carry no probability.
"""

from collections.abc import Sequence

import numpy as np

from graders.active.committee import Committee, committee_for_project, committee_search
from graders.active.draw import pair_key, pool_draw
from graders.engine.active.acquisition import information_gain
from labeling.models import Project, Split
from labeling.strategies import (
    COVERAGE,
    CandidatePair,
    CoverageFirst,
    Ranked,
    StrategyChoice,
    StrategySpec,
)

NAME = "which_wins"
FALLBACK = (
    f"needs a search with at least two graded candidates; serving {COVERAGE.label} until then"
)


class WhichGraderWins:
    """Ranks pairs by a seeded draw from selection probabilities built on information gain."""

    name = NAME

    def __init__(self, committee: Committee, *, epsilon: float, seed: int = 0) -> None:
        self.committee, self.epsilon, self.seed = committee, epsilon, seed

    def values(self, pairs: Sequence[CandidatePair]) -> np.ndarray:
        """Each pair's worth: its information gain when it is an unlabeled D_selection pair
        of graded responses, else 0."""
        committee = self.committee
        valued = [
            i
            for i, pair in enumerate(pairs)
            if pair.split == Split.SELECTION
            and committee.graded(pair.response_a, pair.response_b)
            and pair_key(pair) not in committee.labeled
        ]
        values = np.zeros(len(pairs))
        if valued:
            votes = committee.votes([(pairs[i].response_a, pairs[i].response_b) for i in valued])
            values[valued] = information_gain(committee.posterior, votes)
        return values

    def rank(self, pairs: Sequence[CandidatePair]) -> list[Ranked]:
        return pool_draw(
            pairs,
            in_pool=lambda pair: pair_key(pair) not in self.committee.labeled,
            values=self.values,
            epsilon=self.epsilon,
            seed=self.seed,
        )


def which_wins_build(project: Project, seed: int) -> StrategyChoice:
    committee = committee_for_project(project)
    if committee is None:
        return StrategyChoice(CoverageFirst(seed), fallback=FALLBACK)
    return StrategyChoice(WhichGraderWins(committee, epsilon=project.queue_epsilon, seed=seed))


WHICH_WINS = StrategySpec(
    name=NAME,
    label="Which grader wins",
    hint=(
        "The pairs whose label tells most about which of the latest search's top candidates "
        "is best, plus a random share that keeps accuracies on the labels unbiased once "
        "reweighted."
    ),
    build=which_wins_build,
    unavailable=lambda project: "" if committee_search(project) else FALLBACK,
)
