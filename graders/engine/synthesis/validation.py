"""Human validation of a synthesis: the arithmetic of PADME's Table 2 (section 5.2).

The input is the validation sample: first draws (retry 0) of any cascade outcome, each with the
cascade's votes in order and the human labels it got on its cell's dimension. Definitions the
numbers depend on:

- D_0 is every sampled pair; D_k the pairs whose first k judges all agreed with the constructed
  label (the higher level's response is better). Yield is |D_k| / |D_0|.
- A pair is *complete* once it has at least `min_labels` human labels (the queue's overlap, 3);
  until then it counts in |D_k| and the yield but not in accuracy or alpha.
- The human majority of a complete pair is the verdict (lower level won, higher won, tie) given
  by more than half of its labels. A pair with no such verdict (say 1-1-1) has no reference:
  it is left out of accuracy and alpha and counted in `no_majority`. A majority tie is a
  reference the synthetic label fails (the humans see no contrast where one was built), so it
  counts as wrong, and in alpha it is a category of its own.
- Accuracy is Agr(maj, synthetic; D_k): the share of the pairs with a reference whose majority
  is the higher level. Its 95% interval resamples those pairs (10,000 draws, seed 0).
- Krippendorff's alpha (DESIGN.md section 11): two raters, the synthetic label and the human
  majority; nominal; each pair's decision coded as which of its two responses won, the two taken
  in the order of their ids ("first", "second"), a tie a third value. Coding by id rather than
  by level keeps the synthetic rater from being a constant.
- The pairs judge k rejected are D_{k-1} minus D_k (a veto or no verdict at position k); their
  accuracy is the label validity among them.
- An undefined number is None, never NaN.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import krippendorff
import numpy as np

from graders.engine.metrics import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    ConfidenceInterval,
    task_bootstrap_ci,
)

Verdict = Literal["low", "high", "tie"]
VERDICTS: tuple[Verdict, ...] = ("low", "high", "tie")
# The labels a validation pair asks for (its queue overlap), as in the paper's panels of three.
VALIDATION_OVERLAP = 3
# Alpha's nominal codes: the smaller response id won, the larger one won, a tie.
_FIRST, _SECOND, _TIE = 0, 1, 2


@dataclass(frozen=True)
class ValidationPair:
    """One sampled first draw: its two response ids, the cascade's votes in order (True agreed;
    False or None, no verdict, vetoed and ended it) and its human labels on the dimension."""

    low_id: int
    high_id: int
    cascade: tuple[bool | None, ...]
    human: tuple[Verdict, ...]

    def __post_init__(self) -> None:
        if self.low_id == self.high_id:
            raise ValueError(f"a pair needs two distinct responses, got {self.low_id} twice")
        vetoes = [i for i, vote in enumerate(self.cascade) if vote is not True]
        if vetoes and vetoes[0] != len(self.cascade) - 1:
            raise ValueError(f"the cascade {self.cascade!r} goes on after a veto")
        unknown = sorted({v for v in self.human if v not in VERDICTS})
        if unknown:
            raise ValueError(f"unknown human verdicts {unknown!r}: use low, high or tie")

    def survives(self, depth: int) -> bool:
        """Whether the pair is in D_depth: its first `depth` judges all agreed."""
        return len(self.cascade) >= depth and all(v is True for v in self.cascade[:depth])


@dataclass(frozen=True)
class ValidationInput:
    """The judges of the cascade in order (K of them) and the sampled pairs."""

    judges: tuple[str, ...]
    pairs: tuple[ValidationPair, ...]
    min_labels: int = VALIDATION_OVERLAP

    def __post_init__(self) -> None:
        if not self.judges:
            raise ValueError("a synthesis needs at least one filter judge")
        if self.min_labels < 1:
            raise ValueError("min_labels must be at least 1")
        longer = [p for p in self.pairs if len(p.cascade) > len(self.judges)]
        if longer:
            raise ValueError(
                f"a pair has {len(longer[0].cascade)} votes but the cascade has "
                f"{len(self.judges)} judges"
            )


@dataclass(frozen=True)
class DepthRow:
    """One row of Table 2: D_depth's size and yield, and over its `judged` pairs (complete,
    with a majority) the synthetic label's accuracy, its interval and alpha."""

    depth: int
    pairs: int
    yield_: float | None
    judged: int
    accuracy: float | None
    ci: ConfidenceInterval | None
    krippendorff_alpha: float | None


@dataclass(frozen=True)
class RejectedRow:
    """The pairs a judge rejected (D_{k-1} minus D_k) and the label validity among them."""

    judge: str
    pairs: int
    judged: int
    accuracy: float | None


@dataclass(frozen=True)
class ValidationReport:
    sampled: int
    complete: int
    no_majority: int
    depths: tuple[DepthRow, ...]
    rejected_by: tuple[RejectedRow, ...]


def human_majority(human: Sequence[Verdict], *, min_labels: int) -> Verdict | None:
    """The verdict of more than half of the labels; None with fewer than `min_labels` labels
    or on a split."""
    if not human or len(human) < min_labels:
        return None
    verdict, count = Counter(human).most_common(1)[0]
    return verdict if 2 * count > len(human) else None


def validation_report(
    data: ValidationInput, *, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> ValidationReport:
    """Table 2 for depths 0..K and the rejects of each judge (definitions in the module doc)."""
    majority = [human_majority(p.human, min_labels=data.min_labels) for p in data.pairs]
    complete = [len(p.human) >= data.min_labels for p in data.pairs]
    sampled = len(data.pairs)
    depths = []
    for depth in range(len(data.judges) + 1):
        members = [i for i, p in enumerate(data.pairs) if p.survives(depth)]
        judged = [i for i in members if majority[i] is not None]
        correct = np.array([majority[i] == "high" for i in judged], dtype=np.float64)
        depths.append(
            DepthRow(
                depth=depth,
                pairs=len(members),
                yield_=len(members) / sampled if sampled else None,
                judged=len(judged),
                accuracy=float(correct.mean()) if judged else None,
                ci=(
                    task_bootstrap_ci(correct, np.ones_like(correct), draws=draws, seed=seed)
                    if judged
                    else None
                ),
                krippendorff_alpha=_alpha(
                    [data.pairs[i] for i in judged], [majority[i] for i in judged]
                ),
            )
        )
    rejected = []
    for position, judge in enumerate(data.judges):
        members = [
            i
            for i, p in enumerate(data.pairs)
            if p.survives(position)
            and len(p.cascade) > position
            and p.cascade[position] is not True
        ]
        judged = [i for i in members if majority[i] is not None]
        hits = sum(majority[i] == "high" for i in judged)
        rejected.append(
            RejectedRow(
                judge=judge,
                pairs=len(members),
                judged=len(judged),
                accuracy=hits / len(judged) if judged else None,
            )
        )
    return ValidationReport(
        sampled=sampled,
        complete=sum(complete),
        no_majority=sum(c and m is None for c, m in zip(complete, majority, strict=True)),
        depths=tuple(depths),
        rejected_by=tuple(rejected),
    )


def _alpha(pairs: Sequence[ValidationPair], majority: Sequence[Verdict | None]) -> float | None:
    """Nominal alpha of (synthetic, majority) over pairs that all have a majority; None when
    there is no pair or every value is one category (the expected disagreement is then 0)."""
    if not pairs:
        return None
    synthetic = [_FIRST if p.high_id < p.low_id else _SECOND for p in pairs]
    human = [
        _TIE if m == "tie" else (s if m == "high" else 1 - s)
        for s, m in zip(synthetic, majority, strict=True)
    ]
    if len(set(synthetic) | set(human)) < 2:
        return None
    alpha = krippendorff.alpha(
        reliability_data=np.array([synthetic, human], dtype=np.float64),
        value_domain=[_FIRST, _SECOND, _TIE],
        level_of_measurement="nominal",
    )
    return float(alpha)


def validation_json(report: ValidationReport) -> dict[str, Any]:
    """The `synthesis_validation --json` document of FORMATS.md, numbers unrounded."""
    return {
        "depths": [
            {
                "depth": row.depth,
                "pairs": row.pairs,
                "yield": row.yield_,
                "accuracy": row.accuracy,
                "ci": None if row.ci is None else [row.ci.low, row.ci.high],
                "krippendorff_alpha": row.krippendorff_alpha,
            }
            for row in report.depths
        ],
        "rejected_by": [
            {"judge": row.judge, "pairs": row.pairs, "accuracy": row.accuracy}
            for row in report.rejected_by
        ],
    }
