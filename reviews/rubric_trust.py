"""How far to trust each criterion's judge verdicts: their agreement with the experts.

For one criterion, every expert mark (CriterionGrade) on a response the judge also gave a
verdict on is one comparison; the criterion's trust is the share of comparisons where the two
agree, out of n. Several experts marking one response count once each, so a response two
experts marked weighs twice. A verdict on an earlier wording of the criterion is not compared:
it judged a different criterion.

Attention order puts the least trusted criteria first: lowest share, then most disagreements;
criteria without any comparison come last, in rubric order."""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# (response pk, criterion key) -> passed
Verdicts = Mapping[tuple[int, str], bool]


@dataclass(frozen=True)
class Trust:
    key: str
    agree: int
    n: int

    @property
    def share(self) -> float | None:
        return self.agree / self.n if self.n else None

    @property
    def disagree(self) -> int:
        return self.n - self.agree


def criterion_trust(
    *, keys: Sequence[str], judge: Verdicts, experts: Iterable[tuple[int, str, bool]]
) -> dict[str, Trust]:
    """Trust of each criterion in `keys` from the judge's verdicts and the experts' marks
    (response pk, criterion key, passed)."""
    agree = dict.fromkeys(keys, 0)
    n = dict.fromkeys(keys, 0)
    for response, key, passed in experts:
        verdict = judge.get((response, key))
        if verdict is None or key not in n:
            continue
        n[key] += 1
        agree[key] += verdict == passed
    return {key: Trust(key, agree[key], n[key]) for key in keys}


def attention_order(trusts: Sequence[Trust]) -> list[Trust]:
    """Least trusted first (see the module docstring); a stable sort keeps rubric order."""
    return sorted(
        trusts,
        key=lambda t: (t.n == 0, t.share if t.share is not None else 1.0, -t.disagree),
    )
