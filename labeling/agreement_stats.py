"""Agreement between people (DESIGN.md section 7): kappa, alpha, unanimity, majority, PADME's Agr.

Pure Python (numpy and krippendorff, never Django) so that the `agreement` command, the API and the
admin page share one set of definitions, and the tests pin every number without a database.

Definitions that the numbers depend on:

- A rater's label on a pair is one nominal category: "first" (pair[0] wins), "second" (pair[1]
  wins) or "tie". Ties are a category like the others: they count as votes and as agreement.
- The unit of every statistic is an item, a (pair, dimension): a pair judged on two dimensions is
  two items, because the raters answered two different questions about it. Every `n` counts items.
- Only human labels make up the panel (kappa, alpha, unanimity, majority). Synthetic and judge
  labels are compared with it, never part of it.
- The human majority is the category with more than half of the human votes; a pair one person
  labeled has that person's label as its majority, because most projects label each pair once
  and a provider must still be comparable with the humans there (PADME's Agr). Unanimity and
  alpha, which are about people agreeing with each other, count only pairs with 2+ labels.
- A human is compared with the majority of the *other* humans (leave-one-out); comparing with a
  majority that includes their own vote would let them agree with themselves. With two
  annotators this is each one's raw agreement with the other.
- A number that is undefined is None, never NaN, and the `n` next to it says why.
"""

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import Any, Literal

import krippendorff
import numpy as np

Category = Literal["first", "second", "tie"]
Provider = Literal["human", "synthetic", "judge"]
Item = tuple[tuple[str, str], str | None]

CATEGORIES: tuple[Category, ...] = ("first", "second", "tie")
CONFIDENCE_LEVELS: tuple[int | None, ...] = (0, 1, 2, None)
NO_DIMENSION = "(none)"
# Report order: the machine providers a team compares first, then each person.
PROVIDER_ORDER: tuple[str, ...] = ("synthetic", "judge", "human")


@dataclass(frozen=True, slots=True)
class Label:
    """One current pairwise label: `winner` is a response id of `pair`, None for a tie.

    `pair` is canonical (sorted ids), so "first" means the same response for every rater whatever
    order the pair was shown in. `seconds` is the time spent, used by the per-annotator summary.
    """

    pair: tuple[str, str]
    dimension: str | None
    annotator: str
    provider: Provider
    winner: str | None
    confidence: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        # A wrong pair order or a foreign winner would silently flip one rater's "first" and
        # "second" and read as disagreement, so bad input fails here instead.
        if not self.pair[0] < self.pair[1]:
            raise ValueError(f"pair must be two distinct ids in sorted order, got {self.pair!r}")
        if self.winner is not None and self.winner not in self.pair:
            raise ValueError(f"winner {self.winner!r} is not in pair {self.pair!r}")
        if self.provider not in PROVIDER_ORDER:
            raise ValueError(f"unknown provider {self.provider!r}")
        if self.confidence not in CONFIDENCE_LEVELS:
            raise ValueError(f"confidence must be 0, 1, 2 or None, got {self.confidence!r}")
        if self.provider == "human" and not self.annotator:
            raise ValueError("a human label needs an annotator")

    @property
    def item(self) -> Item:
        return (self.pair, self.dimension)

    @property
    def category(self) -> Category:
        if self.winner is None:
            return "tie"
        return "first" if self.winner == self.pair[0] else "second"


@dataclass(frozen=True, slots=True)
class KappaResult:
    """Cohen's kappa and raw agreement of two annotators over the `n` items both labeled."""

    a: str
    b: str
    kappa: float | None
    agreement: float | None
    n: int


@dataclass(frozen=True, slots=True)
class AlphaResult:
    """Krippendorff's alpha; `n` is the number of items with at least two human labels."""

    alpha: float | None
    n: int


@dataclass(frozen=True, slots=True)
class ShareResult:
    """A share of `n` items, None when n is 0."""

    share: float | None
    n: int


@dataclass(frozen=True, slots=True)
class ProviderAgreement:
    """PADME's Agr: share of `provider`'s labels equal to the reference `vs`, over `n` labels."""

    provider: str
    vs: str
    agreement: float | None
    n: int


@dataclass(frozen=True, slots=True)
class ConfidenceGroup:
    """Provider agreement restricted to labels given with one confidence level."""

    confidence: int | None
    providers: tuple[ProviderAgreement, ...]


@dataclass(frozen=True, slots=True)
class AgreementSummary:
    """Every panel statistic for one set of labels (one dimension, or all pooled)."""

    pairs: int
    annotators: int
    alpha: AlphaResult
    unanimity: ShareResult
    cohen_kappa: tuple[KappaResult, ...]
    providers: tuple[ProviderAgreement, ...]
    by_confidence: tuple[ConfidenceGroup, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    """One human's labels done, speed (median over `seconds_n` timed labels) and confidences."""

    labels: int
    median_seconds: float | None
    seconds_n: int
    confidence: dict[int | None, int]


@dataclass(frozen=True, slots=True)
class AnnotatorSummary:
    """One human's workload, speed and agreement with the leave-one-out majority (`n` labels)."""

    annotator: str
    labels: int
    median_seconds: float | None
    seconds_n: int
    agreement: float | None
    n: int
    confidence: dict[int | None, int]


@dataclass(frozen=True, slots=True)
class _Comparison:
    label: Label
    agrees: bool


def _human_votes(labels: Iterable[Label]) -> dict[Item, dict[str, Category]]:
    """Each item's human labels as annotator -> category: the reliability data of the panel."""
    votes: defaultdict[Item, dict[str, Category]] = defaultdict(dict)
    for label in labels:
        if label.provider != "human":
            continue
        item_votes = votes[label.item]
        # Two labels by one person on one item would double their vote; callers pass current ones.
        if label.annotator in item_votes:
            raise ValueError(f"{label.annotator!r} has two labels on {label.item!r}")
        item_votes[label.annotator] = label.category
    return dict(votes)


def _annotators(votes: dict[Item, dict[str, Category]]) -> list[str]:
    return sorted({annotator for item_votes in votes.values() for annotator in item_votes})


def _ratio(hits: int, n: int) -> float | None:
    return hits / n if n else None


def majority_vote(categories: Sequence[Category]) -> Category | None:
    """The category chosen by more than half of the votes (a lone vote included); None on a
    split or with no votes."""
    if len(categories) <= 2:  # most items: one or two votes, decided without a Counter
        if not categories or categories[0] != categories[-1]:
            return None
        return categories[0]
    category, count = Counter(categories).most_common(1)[0]
    return category if 2 * count > len(categories) else None


def human_majorities(labels: Iterable[Label]) -> dict[Item, Category | None]:
    """The human majority of every item with a human label (None where there is none)."""
    return {
        item: majority_vote(list(item_votes.values()))
        for item, item_votes in _human_votes(labels).items()
    }


def _cohen_kappa(a: str, b: str, shared: list[tuple[Category, Category]]) -> KappaResult:
    """Kappa of `a` and `b` over the (a's, b's) categories of the items both labeled."""
    n = len(shared)
    if n == 0:
        return KappaResult(a, b, None, None, 0)
    # Kept in integers: observed = n * p_o (the confusion matrix's diagonal) and
    # chance = n^2 * p_e (its row marginals times its column marginals), so that the degenerate
    # case p_e == 1 is detected exactly rather than through floating-point rounding.
    observed = sum(x == y for x, y in shared)
    rows = Counter(x for x, _ in shared)
    columns = Counter(y for _, y in shared)
    chance = sum(rows[c] * columns[c] for c in CATEGORIES)
    if chance == n * n:
        # p_e == 1 only when both said one and the same category on every shared item (so p_o is
        # 1 too): kappa is 0/0. Agreement beyond chance cannot be told from chance here, so kappa
        # is None rather than a perfect 1.0 earned by, say, a single shared pair.
        return KappaResult(a, b, None, 1.0, n)
    # (p_o - p_e) / (1 - p_e) multiplied through by n^2.
    kappa = (n * observed - chance) / (n * n - chance)
    return KappaResult(a, b, kappa, observed / n, n)


def cohen_kappa_pairs(labels: Iterable[Label]) -> tuple[KappaResult, ...]:
    """Cohen's kappa for every pair of human annotators, including pairs that share no item.

    Rows with n == 0 stay in so that a panel whose members never overlap shows it.
    """
    return _kappas(_human_votes(labels))


def _kappas(votes: dict[Item, dict[str, Category]]) -> tuple[KappaResult, ...]:
    # Every pair of annotators' shared items in one pass over the items, in item order (a pass
    # per pair read every item 55 times with eleven annotators).
    shared: defaultdict[tuple[str, str], list[tuple[Category, Category]]] = defaultdict(list)
    for item_votes in votes.values():
        if len(item_votes) >= 2:
            for a, b in combinations(sorted(item_votes), 2):
                shared[a, b].append((item_votes[a], item_votes[b]))
    return tuple(
        _cohen_kappa(a, b, shared.get((a, b), [])) for a, b in combinations(_annotators(votes), 2)
    )


def krippendorff_alpha(labels: Iterable[Label]) -> AlphaResult:
    """Nominal Krippendorff's alpha of the human panel, missing labels allowed.

    None when no item has two human labels (nothing is pairable), and None when every pairable
    label is the same category: the expected disagreement is then 0 and alpha is 0/0.
    """
    return _alpha(_human_votes(labels))


def _alpha(votes: dict[Item, dict[str, Category]]) -> AlphaResult:
    pairable = [item_votes for item_votes in votes.values() if len(item_votes) >= 2]
    if not pairable:
        return AlphaResult(None, 0)
    if len({c for item_votes in pairable for c in item_votes.values()}) < 2:
        return AlphaResult(None, len(pairable))
    annotators = _annotators(votes)
    # Annotators x items, NaN where an annotator did not label the item; the package skips the
    # unpairable lone labels itself, as the textbook definition does.
    data = np.full((len(annotators), len(votes)), np.nan)
    for column, item_votes in enumerate(votes.values()):
        for annotator, category in item_votes.items():
            data[annotators.index(annotator), column] = CATEGORIES.index(category)
    alpha = krippendorff.alpha(
        reliability_data=data,
        value_domain=list(range(len(CATEGORIES))),
        level_of_measurement="nominal",
    )
    return AlphaResult(float(alpha), len(pairable))


def unanimity_share(labels: Iterable[Label]) -> ShareResult:
    """Share of items with at least two human labels on which every human said the same."""
    return _unanimity(_human_votes(labels))


def _unanimity(votes: dict[Item, dict[str, Category]]) -> ShareResult:
    pairable = [set(v.values()) for v in votes.values() if len(v) >= 2]
    return ShareResult(_ratio(sum(len(c) == 1 for c in pairable), len(pairable)), len(pairable))


def _row_key(label: Label) -> tuple[str, str]:
    """(provider, vs) of the agreement row a label counts in."""
    if label.provider == "human":
        return (f"human:{label.annotator}", "human_majority_without_self")
    return (label.provider, "human_majority")


def _row_order(key: tuple[str, str]) -> tuple[int, str]:
    return (PROVIDER_ORDER.index(key[0].partition(":")[0]), key[0])


def _reference(label: Label, item_votes: dict[str, Category]) -> Category | None:
    """The human majority a label is judged against: leave-one-out for a human's own label."""
    if label.provider == "human":
        others = [c for annotator, c in item_votes.items() if annotator != label.annotator]
        return majority_vote(others)
    return majority_vote(list(item_votes.values()))


def _comparisons(
    labels: Sequence[Label], votes: dict[Item, dict[str, Category]]
) -> list[_Comparison]:
    """Every label whose item has a reference majority (from `votes`, the labels' human
    votes), with whether it matches it."""
    comparisons = []
    for label in labels:
        reference = _reference(label, votes.get(label.item, {}))
        if reference is not None:
            comparisons.append(_Comparison(label, label.category == reference))
    return comparisons


def _agreement_rows(
    labels: Sequence[Label], comparisons: Sequence[_Comparison]
) -> tuple[ProviderAgreement, ...]:
    """One row per provider present in `labels`, counting `comparisons`; n == 0 rows stay in."""
    hits: Counter[tuple[str, str]] = Counter()
    totals: Counter[tuple[str, str]] = Counter()
    for comparison in comparisons:
        key = _row_key(comparison.label)
        totals[key] += 1
        hits[key] += comparison.agrees
    keys = sorted({_row_key(label) for label in labels}, key=_row_order)
    return tuple(
        ProviderAgreement(key[0], key[1], _ratio(hits[key], totals[key]), totals[key])
        for key in keys
    )


def provider_agreement(labels: Iterable[Label]) -> tuple[ProviderAgreement, ...]:
    """PADME's Agr of each provider and each human with the human majority.

    Synthetic and judge labels are pooled per provider (with one generator or judge per pair,
    n is a number of pairs). Each human is compared with the majority of the other humans.
    """
    labels = list(labels)
    return _agreement_rows(labels, _comparisons(labels, _human_votes(labels)))


def _by_confidence(
    labels: Sequence[Label], comparisons: Sequence[_Comparison]
) -> tuple[ConfidenceGroup, ...]:
    groups = []
    for level in CONFIDENCE_LEVELS:
        level_labels = [label for label in labels if label.confidence == level]
        if level_labels:
            level_comparisons = [c for c in comparisons if c.label.confidence == level]
            groups.append(ConfidenceGroup(level, _agreement_rows(level_labels, level_comparisons)))
    return tuple(groups)


def provider_agreement_by_confidence(labels: Iterable[Label]) -> tuple[ConfidenceGroup, ...]:
    """Provider agreement per confidence level; a label's own confidence selects its group.

    The majority it is compared with is still built from every human label, whatever their
    confidence, so the groups differ only in which provider labels they count.
    """
    labels = list(labels)
    return _by_confidence(labels, _comparisons(labels, _human_votes(labels)))


def agreement_summary(labels: Iterable[Label]) -> AgreementSummary:
    """All panel statistics of these labels, pooled over whatever dimensions they carry."""
    labels = list(labels)
    votes = _human_votes(labels)
    # The votes and the comparisons once for every statistic (a second each on 100,000 labels).
    comparisons = _comparisons(labels, votes)
    return AgreementSummary(
        pairs=len(votes),
        annotators=len(_annotators(votes)),
        alpha=_alpha(votes),
        unanimity=_unanimity(votes),
        cohen_kappa=_kappas(votes),
        providers=_agreement_rows(labels, comparisons),
        by_confidence=_by_confidence(labels, comparisons),
    )


def _summary_json(summary: AgreementSummary) -> dict[str, Any]:
    return {
        "pairs": summary.pairs,
        "annotators": summary.annotators,
        # The n behind both krippendorff_alpha and unanimous_share.
        "overlap_pairs": summary.alpha.n,
        "krippendorff_alpha": summary.alpha.alpha,
        "unanimous_share": summary.unanimity.share,
        "cohen_kappa": [asdict(row) for row in summary.cohen_kappa],
        "providers": [asdict(row) for row in summary.providers],
        "by_confidence": [
            {"confidence": group.confidence, "providers": [asdict(row) for row in group.providers]}
            for group in summary.by_confidence
        ],
    }


def _dimension_order(dimension: str | None) -> tuple[bool, str]:
    return (dimension is not None, dimension or "")


def agreement_report(labels: Iterable[Label], *, dimension: str | None = None) -> dict[str, Any]:
    """The `agreement --json` document (FORMATS.md), with by_dimension and by_confidence.

    `dimension` None pools every dimension (each (pair, dimension) is one item); a name keeps only
    that dimension's labels. Labels without a dimension appear in by_dimension as "(none)".
    Numbers are not rounded: the command formats them.
    """
    labels = [label for label in labels if dimension is None or label.dimension == dimension]
    pooled = _summary_json(agreement_summary(labels))
    dimensions = sorted({label.dimension for label in labels}, key=_dimension_order)
    # With one dimension its summary is the pooled one: computed once.
    by_dimension = [
        pooled
        if len(dimensions) == 1
        else _summary_json(agreement_summary(lb for lb in labels if lb.dimension == name))
        for name in dimensions
    ]
    return pooled | {
        "by_dimension": [
            {"dimension": NO_DIMENSION if name is None else name, **summary}
            for name, summary in zip(dimensions, by_dimension, strict=True)
        ]
    }


def annotator_workload(own: Sequence[Label]) -> Workload:
    """One person's labels done, median seconds and confidences: nothing that reads anyone
    else's label. The median ignores labels with no recorded time (`seconds_n` says how many)."""
    seconds = [lb.seconds for lb in own if lb.seconds is not None]
    confidences = Counter(lb.confidence for lb in own)
    return Workload(
        labels=len(own),
        median_seconds=statistics.median(seconds) if seconds else None,
        seconds_n=len(seconds),
        confidence={level: confidences[level] for level in CONFIDENCE_LEVELS},
    )


def annotator_summaries(labels: Iterable[Label]) -> tuple[AnnotatorSummary, ...]:
    """Per human annotator: their workload and their leave-one-out agreement."""
    labels = list(labels)
    votes = _human_votes(labels)
    # Each person's labels and comparisons in one pass, not one pass per person.
    own: defaultdict[str, list[Label]] = defaultdict(list)
    for label in labels:
        if label.provider == "human":
            own[label.annotator].append(label)
    agrees: defaultdict[str, list[bool]] = defaultdict(list)
    for comparison in _comparisons(labels, votes):
        if comparison.label.provider == "human":
            agrees[comparison.label.annotator].append(comparison.agrees)
    summaries = []
    for annotator in _annotators(votes):
        workload = annotator_workload(own[annotator])
        matched = agrees[annotator]
        summaries.append(
            AnnotatorSummary(
                annotator=annotator,
                labels=workload.labels,
                median_seconds=workload.median_seconds,
                seconds_n=workload.seconds_n,
                agreement=_ratio(sum(matched), len(matched)),
                n=len(matched),
                confidence=workload.confidence,
            )
        )
    return tuple(summaries)


# What a person who labels may see of the panel (panel_report): figures over at least this many
# other annotators and this many items that two or more of them labeled.
PANEL_MIN_ANNOTATORS = 3
PANEL_MIN_OVERLAP_PAIRS = 20


def _panel_json(others: Sequence[Label]) -> dict[str, Any]:
    votes = _human_votes(others)
    alpha = krippendorff_alpha(others)
    annotators = len(_annotators(votes))
    shown = annotators >= PANEL_MIN_ANNOTATORS and alpha.n >= PANEL_MIN_OVERLAP_PAIRS
    return {
        "pairs": len(votes),
        "annotators": annotators,
        "overlap_pairs": alpha.n,
        "shown": shown,
        "krippendorff_alpha": alpha.alpha if shown else None,
        "unanimous_share": unanimity_share(others).share if shown else None,
    }


def panel_report(others: Iterable[Label], *, dimension: str | None = None) -> dict[str, Any]:
    """The panel figures a labeler may see: alpha and unanimity of the *other* annotators,
    pooled and by dimension, each withheld (`shown` false, figures None) below the minimums.

    Why these and nothing else. The attack to defeat: label a pair a colleague labeled, look,
    revise the label, look again; whatever moved was computed from both labels, so it tells the
    colleague's choice (a kappa row "me vs bob" flips from 1 to 0; so does "my agreement with the
    majority without me", by 1/n, telling whether the others' majority on that pair matched).

    1. `others` must not hold the viewer's labels: the selector leaves them out of what it
       fetches. No figure here is then a function of the viewer's labels at all, so labeling or
       revising anything changes nothing on the page and the differencing above has nothing to
       difference. This is also why the viewer's own agreement is not shown, however coarsely:
       any such figure moves with their own label in a direction set by the others' labels.
    2. No row names or pairs a person: no kappa per pair of annotators, no per-person agreement.
    3. The figures that remain are functions of the others' labels only, and are shown only over
       at least PANEL_MIN_ANNOTATORS other people and PANEL_MIN_OVERLAP_PAIRS items with 2+ of
       their labels. With one or two others, "the panel" is a statement about those named
       colleagues (with two, alpha is their pairwise agreement); with a handful of items one
       colleague's label moves a figure far. What is left: a figure moves when a colleague labels
       an overlapping pair, which tells that someone labeled something (as queue progress does),
       not who, which pair or which choice.
    """
    others = [lb for lb in others if lb.provider == "human"]
    others = [lb for lb in others if dimension is None or lb.dimension == dimension]
    report = _panel_json(others)
    report["min_annotators"] = PANEL_MIN_ANNOTATORS
    report["min_overlap_pairs"] = PANEL_MIN_OVERLAP_PAIRS
    dimensions = sorted({label.dimension for label in others}, key=_dimension_order)
    report["by_dimension"] = [
        {
            "dimension": NO_DIMENSION if name is None else name,
            **_panel_json([lb for lb in others if lb.dimension == name]),
        }
        for name in dimensions
    ]
    return report
