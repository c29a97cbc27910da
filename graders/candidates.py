"""Ranking a search's candidates: by tolerant ranking accuracy on D_selection, ties to the
cheaper program, then to the earlier one (so the baseline wins ties, and a rerun picks the
same winner)."""

from collections.abc import Iterable

from graders.models import Candidate, CandidateStatus

# Two accuracies closer than this are equal (0.8 - 0.7 is not exactly 0.1).
EPSILON = 1e-9


def candidate_better(a: Candidate, b: Candidate | None) -> bool:
    if b is None or b.score is None:
        return a.score is not None
    if a.score is None:
        return False
    if abs(a.score - b.score) > EPSILON:
        return a.score > b.score
    cost_a, cost_b = a.calls_per_response or 0.0, b.calls_per_response or 0.0
    if abs(cost_a - cost_b) > EPSILON:
        return cost_a < cost_b
    return (a.iteration, a.position) < (b.iteration, b.position)


def candidates_ranked(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Graded candidates, best first."""
    ranked: list[Candidate] = []
    for candidate in candidates:
        if candidate.status != CandidateStatus.GRADED or candidate.score is None:
            continue
        at = next((i for i, other in enumerate(ranked) if candidate_better(candidate, other)), None)
        ranked.insert(len(ranked) if at is None else at, candidate)
    return ranked


def best_candidate(candidates: Iterable[Candidate]) -> Candidate | None:
    ranked = candidates_ranked(candidates)
    return ranked[0] if ranked else None
