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


Vote = tuple[str, Provider, Category, int | None]
# How many items of a dimension carry exactly these votes, each an (annotator, provider,
# category, confidence), the annotator "" unless human. Every statistic here is a sum over items
# of a function of the item's votes alone, so counting the items that share their votes loses
# nothing: 100,000 labels reduce to the few hundred vote sets the database counts
# (selectors.agreement_tally), and every number is the same as when computed label by label.
Tally = Counter[tuple[str | None, tuple[Vote, ...]]]
# How many human labels each (annotator, confidence, seconds) has: the workload figures.
Workloads = Counter[tuple[str, int | None, float | None]]


def vote_order(vote: Vote) -> tuple[str, str, str, int]:
    return (vote[0], vote[1], vote[2], -1 if vote[3] is None else vote[3])


def tally(labels: Iterable[Label]) -> Tally:
    """The labels counted as items by their votes (the database counts them the same way)."""
    items: defaultdict[Item, list[Vote]] = defaultdict(list)
    for label in labels:
        annotator = label.annotator if label.provider == "human" else ""
        items[label.item].append((annotator, label.provider, label.category, label.confidence))
    return Counter((item[1], tuple(sorted(votes, key=vote_order))) for item, votes in items.items())


def workloads(labels: Iterable[Label]) -> Workloads:
    """The human labels counted by (annotator, confidence, seconds)."""
    return Counter(
        (label.annotator, label.confidence, label.seconds)
        for label in labels
        if label.provider == "human"
    )


@dataclass(frozen=True, slots=True)
class _Items:
    """`weight` items of one dimension with the same votes; `human` is their panel's part,
    annotator -> category."""

    dimension: str | None
    votes: tuple[Vote, ...]
    human: dict[str, Category]
    weight: int


def _items(counted: Tally) -> list[_Items]:
    items = []
    for (dimension, votes), weight in counted.items():
        human: dict[str, Category] = {}
        for annotator, provider, category, _ in votes:
            if provider != "human":
                continue
            if not annotator:
                raise ValueError("a human label needs an annotator")
            # Two labels by one person on one item would double their vote; callers pass
            # current ones.
            if annotator in human:
                raise ValueError(f"{annotator!r} has two labels on one item of {dimension!r}")
            human[annotator] = category
        items.append(_Items(dimension, votes, human, weight))
    # In one order whatever order the tally was counted in, so that alpha's floating-point sums,
    # and so alpha, do not depend on it.
    return sorted(items, key=_items_order)


def _items_order(item: _Items) -> tuple[tuple[bool, str], list[tuple[str, str, str, int]]]:
    return (_dimension_order(item.dimension), [vote_order(vote) for vote in item.votes])


def _human_votes(labels: Iterable[Label]) -> dict[Item, dict[str, Category]]:
    """Each item's human labels as annotator -> category."""
    votes: defaultdict[Item, dict[str, Category]] = defaultdict(dict)
    for label in labels:
        if label.provider != "human":
            continue
        item_votes = votes[label.item]
        if label.annotator in item_votes:
            raise ValueError(f"{label.annotator!r} has two labels on {label.item!r}")
        item_votes[label.annotator] = label.category
    return dict(votes)


def _annotators(items: Iterable[_Items]) -> list[str]:
    return sorted({annotator for item in items for annotator in item.human})


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


def _cohen_kappa(a: str, b: str, confusion: Counter[tuple[Category, Category]]) -> KappaResult:
    """Kappa of `a` and `b` from how many shared items had each (a's, b's) categories."""
    n = sum(confusion.values())
    if n == 0:
        return KappaResult(a, b, None, None, 0)
    # Kept in integers: observed = n * p_o (the confusion matrix's diagonal) and
    # chance = n^2 * p_e (its row marginals times its column marginals), so that the degenerate
    # case p_e == 1 is detected exactly rather than through floating-point rounding.
    observed = sum(count for (x, y), count in confusion.items() if x == y)
    rows: Counter[Category] = Counter()
    columns: Counter[Category] = Counter()
    for (x, y), count in confusion.items():
        rows[x] += count
        columns[y] += count
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
    return _kappas(_items(tally(labels)))


def _kappas(items: Sequence[_Items]) -> tuple[KappaResult, ...]:
    # Every pair of annotators' confusion counts in one pass over the items.
    confusion: defaultdict[tuple[str, str], Counter[tuple[Category, Category]]] = defaultdict(
        Counter
    )
    for item in items:
        if len(item.human) >= 2:
            for a, b in combinations(sorted(item.human), 2):
                confusion[a, b][item.human[a], item.human[b]] += item.weight
    return tuple(
        _cohen_kappa(a, b, confusion.get((a, b), Counter()))
        for a, b in combinations(_annotators(items), 2)
    )


def krippendorff_alpha(labels: Iterable[Label]) -> AlphaResult:
    """Nominal Krippendorff's alpha of the human panel, missing labels allowed.

    None when no item has two human labels (nothing is pairable), and None when every pairable
    label is the same category: the expected disagreement is then 0 and alpha is 0/0.
    """
    return _alpha(_items(tally(labels)))


def _alpha(items: Sequence[_Items]) -> AlphaResult:
    pairable = [item for item in items if len(item.human) >= 2]
    n = sum(item.weight for item in pairable)
    if not pairable:
        return AlphaResult(None, 0)
    if len({c for item in pairable for c in item.human.values()}) < 2:
        return AlphaResult(None, n)
    # Items x categories, how many of an item's human labels said each; the lone labels of
    # unpairable items count for nothing in alpha, so they are left out. The package sums over
    # items in another order than label by label, so alpha may differ in its last bits.
    counts = [[list(item.human.values()).count(c) for c in CATEGORIES] for item in pairable]
    value_counts = np.repeat(np.array(counts), [item.weight for item in pairable], axis=0)
    alpha = krippendorff.alpha(value_counts=value_counts, level_of_measurement="nominal")
    return AlphaResult(float(alpha), n)


def unanimity_share(labels: Iterable[Label]) -> ShareResult:
    """Share of items with at least two human labels on which every human said the same."""
    return _unanimity(_items(tally(labels)))


def _unanimity(items: Sequence[_Items]) -> ShareResult:
    pairable = [item for item in items if len(item.human) >= 2]
    n = sum(item.weight for item in pairable)
    hits = sum(item.weight for item in pairable if len(set(item.human.values())) == 1)
    return ShareResult(_ratio(hits, n), n)


def _row_key(vote: Vote) -> tuple[str, str]:
    """(provider, vs) of the agreement row a label counts in."""
    if vote[1] == "human":
        return (f"human:{vote[0]}", "human_majority_without_self")
    return (vote[1], "human_majority")


def _row_order(key: tuple[str, str]) -> tuple[int, str]:
    return (PROVIDER_ORDER.index(key[0].partition(":")[0]), key[0])


def _reference(vote: Vote, human: dict[str, Category]) -> Category | None:
    """The human majority a label is judged against: leave-one-out for a human's own label."""
    if vote[1] == "human":
        return majority_vote([c for annotator, c in human.items() if annotator != vote[0]])
    return majority_vote(list(human.values()))


# A row key and a confidence level.
_Cell = tuple[tuple[str, str], int | None]


@dataclass(frozen=True, slots=True)
class _Comparisons:
    """Per (row key, confidence): the labels there (`present`), how many have a reference
    majority (`totals`) and how many of those match it (`hits`)."""

    present: set[_Cell]
    totals: Counter[_Cell]
    hits: Counter[_Cell]


def _comparisons(items: Sequence[_Items]) -> _Comparisons:
    compared = _Comparisons(set(), Counter(), Counter())
    for item in items:
        for vote in item.votes:
            cell = (_row_key(vote), vote[3])
            compared.present.add(cell)
            reference = _reference(vote, item.human)
            if reference is not None:
                compared.totals[cell] += item.weight
                compared.hits[cell] += item.weight * (vote[2] == reference)
    return compared


def _agreement_rows(
    compared: _Comparisons, levels: Sequence[int | None] = CONFIDENCE_LEVELS
) -> tuple[ProviderAgreement, ...]:
    """One row per provider with a label at one of `levels`; n == 0 rows stay in."""
    keys = sorted({key for key, level in compared.present if level in levels}, key=_row_order)
    rows = []
    for key in keys:
        total = sum(compared.totals[key, level] for level in levels)
        hits = sum(compared.hits[key, level] for level in levels)
        rows.append(ProviderAgreement(key[0], key[1], _ratio(hits, total), total))
    return tuple(rows)


def provider_agreement(labels: Iterable[Label]) -> tuple[ProviderAgreement, ...]:
    """PADME's Agr of each provider and each human with the human majority.

    Synthetic and judge labels are pooled per provider (with one generator or judge per pair,
    n is a number of pairs). Each human is compared with the majority of the other humans.
    """
    return _agreement_rows(_comparisons(_items(tally(labels))))


def _by_confidence(compared: _Comparisons) -> tuple[ConfidenceGroup, ...]:
    present = {level for _, level in compared.present}
    return tuple(
        ConfidenceGroup(level, _agreement_rows(compared, (level,)))
        for level in CONFIDENCE_LEVELS
        if level in present
    )


def provider_agreement_by_confidence(labels: Iterable[Label]) -> tuple[ConfidenceGroup, ...]:
    """Provider agreement per confidence level; a label's own confidence selects its group.

    The majority it is compared with is still built from every human label, whatever their
    confidence, so the groups differ only in which provider labels they count.
    """
    return _by_confidence(_comparisons(_items(tally(labels))))


def agreement_summary(labels: Iterable[Label]) -> AgreementSummary:
    """All panel statistics of these labels, pooled over whatever dimensions they carry."""
    return _summary(_items(tally(labels)))


def _summary(items: Sequence[_Items]) -> AgreementSummary:
    # The comparisons once for every statistic that reads them.
    compared = _comparisons(items)
    return AgreementSummary(
        pairs=sum(item.weight for item in items if item.human),
        annotators=len(_annotators(items)),
        alpha=_alpha(items),
        unanimity=_unanimity(items),
        cohen_kappa=_kappas(items),
        providers=_agreement_rows(compared),
        by_confidence=_by_confidence(compared),
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
    return tally_report(tally(labels), dimension=dimension)


def tally_report(counted: Tally, *, dimension: str | None = None) -> dict[str, Any]:
    """agreement_report of the labels `counted` counts."""
    items = [item for item in _items(counted) if dimension is None or item.dimension == dimension]
    pooled = _summary_json(_summary(items))
    dimensions = sorted({item.dimension for item in items}, key=_dimension_order)
    # With one dimension its summary is the pooled one: computed once.
    by_dimension = [
        pooled
        if len(dimensions) == 1
        else _summary_json(_summary([item for item in items if item.dimension == name]))
        for name in dimensions
    ]
    return pooled | {
        "by_dimension": [
            {"dimension": NO_DIMENSION if name is None else name, **summary}
            for name, summary in zip(dimensions, by_dimension, strict=True)
        ]
    }


def _median(counts: Counter[float]) -> float | None:
    values = [value for value, count in sorted(counts.items()) for _ in range(count)]
    return statistics.median(values) if values else None


def workload(counts: Counter[tuple[int | None, float | None]]) -> Workload:
    """One person's labels done, median seconds and confidences from their labels counted by
    (confidence, seconds): nothing that reads anyone else's label. The median ignores labels
    with no recorded time (`seconds_n` says how many)."""
    seconds: Counter[float] = Counter()
    confidences: Counter[int | None] = Counter()
    for (confidence, spent), count in counts.items():
        confidences[confidence] += count
        if spent is not None:
            seconds[spent] += count
    return Workload(
        labels=sum(confidences.values()),
        median_seconds=_median(seconds),
        seconds_n=sum(seconds.values()),
        confidence={level: confidences[level] for level in CONFIDENCE_LEVELS},
    )


def annotator_summaries(labels: Iterable[Label]) -> tuple[AnnotatorSummary, ...]:
    """Per human annotator: their workload and their leave-one-out agreement."""
    labels = list(labels)
    return tally_annotator_summaries(tally(labels), workloads(labels))


def tally_annotator_summaries(counted: Tally, counts: Workloads) -> tuple[AnnotatorSummary, ...]:
    """annotator_summaries of the labels `counted` and `counts` count."""
    items = _items(counted)
    compared = _comparisons(items)
    own: defaultdict[str, Counter[tuple[int | None, float | None]]] = defaultdict(Counter)
    for (annotator, confidence, seconds), count in counts.items():
        own[annotator][confidence, seconds] += count
    summaries = []
    for annotator in _annotators(items):
        done = workload(own[annotator])
        key = _row_key((annotator, "human", "tie", None))
        n = sum(compared.totals[key, level] for level in CONFIDENCE_LEVELS)
        hits = sum(compared.hits[key, level] for level in CONFIDENCE_LEVELS)
        summaries.append(
            AnnotatorSummary(
                annotator=annotator,
                labels=done.labels,
                median_seconds=done.median_seconds,
                seconds_n=done.seconds_n,
                agreement=_ratio(hits, n),
                n=n,
                confidence=done.confidence,
            )
        )
    return tuple(summaries)


# What a person who labels may see of the panel (panel_report): figures over at least this many
# other annotators and this many items that two or more of them labeled.
PANEL_MIN_ANNOTATORS = 3
PANEL_MIN_OVERLAP_PAIRS = 20


def _panel_json(items: Sequence[_Items]) -> dict[str, Any]:
    alpha = _alpha(items)
    annotators = len(_annotators(items))
    shown = annotators >= PANEL_MIN_ANNOTATORS and alpha.n >= PANEL_MIN_OVERLAP_PAIRS
    return {
        "pairs": sum(item.weight for item in items if item.human),
        "annotators": annotators,
        "overlap_pairs": alpha.n,
        "shown": shown,
        "krippendorff_alpha": alpha.alpha if shown else None,
        "unanimous_share": _unanimity(items).share if shown else None,
    }


def panel_report(others: Iterable[Label], *, dimension: str | None = None) -> dict[str, Any]:
    """panel_report of these labels (tally_panel_report says what it shows and why)."""
    return tally_panel_report(
        tally(lb for lb in others if lb.provider == "human"), dimension=dimension
    )


def tally_panel_report(counted: Tally, *, dimension: str | None = None) -> dict[str, Any]:
    """The panel figures a labeler may see: alpha and unanimity of the *other* annotators,
    pooled and by dimension, each withheld (`shown` false, figures None) below the minimums.

    Why these and nothing else. The attack to defeat: label a pair a colleague labeled, look,
    revise the label, look again; whatever moved was computed from both labels, so it tells the
    colleague's choice (a kappa row "me vs bob" flips from 1 to 0; so does "my agreement with the
    majority without me", by 1/n, telling whether the others' majority on that pair matched).

    1. `counted` must not count the viewer's labels: the selector leaves them out of what it
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
    items = [item for item in _items(counted) if dimension is None or item.dimension == dimension]
    # Only the human votes make up the panel.
    report = _panel_json([item for item in items if item.human])
    report["min_annotators"] = PANEL_MIN_ANNOTATORS
    report["min_overlap_pairs"] = PANEL_MIN_OVERLAP_PAIRS
    dimensions = sorted({item.dimension for item in items if item.human}, key=_dimension_order)
    report["by_dimension"] = [
        {
            "dimension": NO_DIMENSION if name is None else name,
            **_panel_json([item for item in items if item.human and item.dimension == name]),
        }
        for name in dimensions
    ]
    return report
