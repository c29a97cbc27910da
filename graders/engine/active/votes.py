"""A candidate grader's vote on a pair of responses, and the credit a label gives that vote.

A vote is +1 (a better), -1 (b better) or 0 (a predicted tie within `tol`, or a failed grade).
Credit against a label y in {+1, -1} is the tolerant credit of DESIGN.md section 7: 1 for the
labeled side, 0.5 for a tie, 0 for the other side. A failed grade votes 0 and so earns 0.5 here,
not the 0 the reported metrics give it: here the credit only ranks candidates against each other
on pairs where they disagree, and a candidate that abstains should neither win nor lose the pair.
"""

import numpy as np
import numpy.typing as npt

from graders.engine.metrics import FLOAT_SLACK

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def pair_votes(score_a: FloatArray, score_b: FloatArray, *, tol: float) -> IntArray:
    """Votes of K candidates on P pairs: arrays of shape (P, K) in and out.

    +1 where s_a - s_b > tol, -1 where s_b - s_a > tol, else 0 (NaN differences compare False, so
    a failed grade on either side votes 0). Differences within FLOAT_SLACK of tol count as ties,
    as in the tolerant ranking accuracy.
    """
    a, b = np.asarray(score_a, dtype=np.float64), np.asarray(score_b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"score_a has shape {a.shape} and score_b {b.shape}")
    if not (np.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol}")
    difference = a - b
    votes = np.zeros(difference.shape, dtype=np.int64)
    votes[difference > tol + FLOAT_SLACK] = 1
    votes[difference < -(tol + FLOAT_SLACK)] = -1
    return votes


def vote_credit(votes: IntArray, label: int | IntArray) -> FloatArray:
    """Credit of each vote against `label` (+1 or -1, broadcast against `votes`): 1 if they
    agree, 0.5 for a tie vote, 0 if they disagree; that is (1 + vote * label) / 2."""
    return (1.0 + np.asarray(votes, dtype=np.float64) * np.asarray(label, dtype=np.float64)) / 2.0


def require_votes(votes: IntArray, *, name: str = "votes") -> IntArray:
    """`votes` as a 2-D int64 array of -1, 0, +1, or a ValueError naming it."""
    array = np.asarray(votes)
    if array.ndim != 2:
        raise ValueError(f"{name} must have shape (pairs, candidates), got shape {array.shape}")
    if array.size and not np.isin(array, (-1, 0, 1)).all():
        raise ValueError(f"{name} must hold only -1, 0 and +1")
    return array.astype(np.int64, copy=False)


def discriminating(votes: IntArray) -> npt.NDArray[np.bool_]:
    """Rows (pairs) on which the candidates' votes are not all identical. A pair every candidate
    votes the same way adds the same credit to every candidate, so it cannot change which one
    is best."""
    if votes.shape[1] == 0:
        return np.zeros(votes.shape[0], dtype=np.bool_)
    varied: npt.NDArray[np.bool_] = (votes != votes[:, :1]).any(axis=1)
    return varied
