"""Ranking a search's candidates and picking its winner.

The leaderboard ranks by tolerant ranking accuracy on all of D_selection (`score`), ties to the
cheaper program, then to the earlier one (so the baseline wins ties, and a rerun picks the same
winner). The winner, and what the proposer is told about each candidate, come from the search's
selection rule (graders/engine/selection.py, DESIGN.md section 8b), applied to the per-task
credit each selection run's evaluation keeps ("by_task", graders/evaluation.py)."""

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from graders.engine.selection import (
    Selection,
    SelectionInput,
    SelectionRule,
    selection_select,
)
from graders.evaluation import grading_evaluate
from graders.models import Candidate, CandidateStatus, SearchRun

# Two accuracies closer than this are equal (0.8 - 0.7 is not exactly 0.1).
EPSILON = 1e-9


def candidate_better(a: Candidate, b: Candidate | None, by: str = "score") -> bool:
    value_a, value_b = getattr(a, by), None if b is None else getattr(b, by)
    if b is None or value_b is None:
        return value_a is not None
    if value_a is None:
        return False
    if abs(value_a - value_b) > EPSILON:
        return bool(value_a > value_b)
    cost_a, cost_b = a.calls_per_response or 0.0, b.calls_per_response or 0.0
    if abs(cost_a - cost_b) > EPSILON:
        return cost_a < cost_b
    return (a.iteration, a.position) < (b.iteration, b.position)


def candidates_ranked(candidates: Iterable[Candidate], by: str = "score") -> list[Candidate]:
    """Graded candidates with a value of `by` ("score", or "feedback_score": what the
    proposer was told), best first."""
    ranked: list[Candidate] = []
    for candidate in candidates:
        if candidate.status != CandidateStatus.GRADED or getattr(candidate, by) is None:
            continue
        at = next(
            (i for i, other in enumerate(ranked) if candidate_better(candidate, other, by)), None
        )
        ranked.insert(len(ranked) if at is None else at, candidate)
    return ranked


@dataclass(frozen=True)
class CandidateSelection:
    """A selection rule applied to a search's graded candidates: `candidates[i]` is row i of
    `inputs` and of the `selection` arrays; `feedback_tasks` are the task ids the proposer may
    hear about (all of the shared tasks for a rule without a split)."""

    candidates: list[Candidate]
    inputs: SelectionInput
    selection: Selection
    feedback_tasks: frozenset[int]

    @property
    def winner(self) -> Candidate:
        return self.candidates[self.selection.winner]


def candidates_select(
    search: SearchRun, candidates: Iterable[Candidate]
) -> CandidateSelection | None:
    """The search's rule over its graded candidates, in proposal order; None when none has
    anything to compare. Candidates are compared on the tasks every one of them was graded on
    with the same pairs (a task added to D_selection, or relabeled, mid-search would otherwise
    favour whoever saw it). Raises ValueError when a split rule has fewer than two tasks."""
    graded = sorted(
        (
            c
            for c in candidates
            if c.status == CandidateStatus.GRADED
            and c.score is not None
            and c.selection_run is not None
        ),
        key=lambda c: (c.iteration, c.position),
    )
    records = [_task_credit(c) for c in graded]
    if not records:
        return None
    shared = set.intersection(*({(t, p) for t, (_, p) in r.items()} for r in records))
    tasks = sorted(task for task, _ in shared)
    if not tasks:
        return None
    pairs = dict(shared)
    inputs = SelectionInput(
        credit=np.array([[r[t][0] for t in tasks] for r in records], dtype=np.float64),
        pairs=np.array([pairs[t] for t in tasks], dtype=np.float64),
        tasks=np.array(tasks, dtype=np.int64),
        cost=np.array([c.calls_per_response or 0.0 for c in graded], dtype=np.float64),
        seed=search.seed,
    )
    rule = SelectionRule(search.selection_rule)
    selection = selection_select(rule, inputs)
    held = selection.untouched_tasks
    feedback_tasks = frozenset(
        tasks
        if held is None
        else (t for t, kept in zip(tasks, held.tolist(), strict=True) if not kept)
    )
    return CandidateSelection(graded, inputs, selection, feedback_tasks)


def _task_credit(candidate: Candidate) -> dict[int, tuple[float, int]]:
    """{task id: (tolerant credit sum, pairs)} of the candidate's selection run. A run
    evaluated before evaluations kept "by_task" is evaluated again (not stored: that stays
    the grading's job)."""
    assert candidate.selection_run is not None
    by_task = candidate.selection_run.evaluation.get("by_task")
    if by_task is None:
        by_task = grading_evaluate(run=candidate.selection_run).get("by_task", {})
    return {int(task): (float(credit), int(pairs)) for task, (credit, pairs) in by_task.items()}
