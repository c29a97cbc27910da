"""Agreement statistics, every number computed by hand in the comments (no database needed)."""

import json
from typing import cast

import pytest

from labeling.agreement_stats import (
    PANEL_MIN_ANNOTATORS,
    PANEL_MIN_OVERLAP_PAIRS,
    AlphaResult,
    KappaResult,
    Label,
    ProviderAgreement,
    ShareResult,
    agreement_report,
    agreement_summary,
    annotator_summaries,
    cohen_kappa_pairs,
    human_majorities,
    krippendorff_alpha,
    majority_vote,
    panel_report,
    provider_agreement,
    provider_agreement_by_confidence,
    unanimity_share,
)

# F = first response of the pair wins, S = second wins, T = tie.
WINNER = {"F": 0, "S": 1, "T": None}


def near(value: float) -> float:
    """pytest.approx typed as the float it stands for, so result dataclasses can hold it."""
    return cast(float, pytest.approx(value))


def pair_of(name: str) -> tuple[str, str]:
    return (f"{name}/a", f"{name}/b")


def lab(
    name: str,
    who: str,
    choice: str,
    provider: str = "human",
    *,
    confidence: int | None = None,
    dimension: str | None = None,
    seconds: float | None = None,
) -> Label:
    pair = pair_of(name)
    index = WINNER[choice]
    winner = None if index is None else pair[index]
    return Label(pair, dimension, who, provider, winner, confidence, seconds)  # type: ignore[arg-type]


def humans(table: dict[str, dict[str, str]], **kwargs: object) -> list[Label]:
    """{pair: {annotator: choice}} -> human labels."""
    return [
        lab(name, who, choice, **kwargs)  # type: ignore[arg-type]
        for name, row in table.items()
        for who, choice in row.items()
    ]


# The worked panel used by several tests. Columns are pairs, "-" is a missing label.
#
#            p1  p2  p3  p4  p5
#   alice    F   F   T   S   F
#   bob      F   S   T   -   -
#   carol    F   -   S   S   -
#   gen      F   F   S   S   F     (synthetic; confidence 2 2 2 1 1)
PANEL = [
    *humans(
        {
            "p1": {"alice": "F", "bob": "F", "carol": "F"},
            "p2": {"alice": "F", "bob": "S"},
            "p3": {"alice": "T", "bob": "T", "carol": "S"},
            "p4": {"alice": "S", "carol": "S"},
            "p5": {"alice": "F"},
        }
    ),
    lab("p1", "gen", "F", "synthetic", confidence=2),
    lab("p2", "gen", "F", "synthetic", confidence=2),
    lab("p3", "gen", "S", "synthetic", confidence=2),
    lab("p4", "gen", "S", "synthetic", confidence=1),
    lab("p5", "gen", "F", "synthetic", confidence=1),
]


def test_label_category_follows_the_canonical_pair_order() -> None:
    assert lab("p1", "alice", "F").category == "first"
    assert lab("p1", "alice", "S").category == "second"
    assert lab("p1", "alice", "T").category == "tie"
    assert lab("p1", "alice", "F", dimension="tone").item == (("p1/a", "p1/b"), "tone")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pair": ("b", "a")}, "sorted order"),
        ({"pair": ("a", "a")}, "sorted order"),
        ({"winner": "c"}, "not in pair"),
        ({"provider": "crowd"}, "unknown provider"),
        ({"confidence": 3}, "confidence"),
        ({"annotator": ""}, "needs an annotator"),
    ],
)
def test_label_rejects_input_that_would_flip_or_hide_a_vote(
    fields: dict[str, object], message: str
) -> None:
    base: dict[str, object] = {
        "pair": ("a", "b"),
        "dimension": None,
        "annotator": "alice",
        "provider": "human",
        "winner": "a",
    }
    with pytest.raises(ValueError, match=message):
        Label(**(base | fields))  # type: ignore[arg-type]


def test_a_second_label_by_the_same_person_on_an_item_is_refused() -> None:
    with pytest.raises(ValueError, match="two labels"):
        unanimity_share([lab("p1", "alice", "F"), lab("p1", "alice", "S")])


def test_cohen_kappa_on_the_panel_by_hand() -> None:
    # alice-bob share p1 p2 p3: (F,F) (F,S) (T,T). p_o = 2/3.
    #   alice F2 S0 T1, bob F1 S1 T1: p_e = (2*1 + 0*1 + 1*1) / 9 = 1/3.
    #   kappa = (2/3 - 1/3) / (1 - 1/3) = 0.5.
    # alice-carol share p1 p3 p4: (F,F) (T,S) (S,S). p_o = 2/3.
    #   alice F1 S1 T1, carol F1 S2 T0: p_e = (1*1 + 1*2 + 1*0) / 9 = 1/3. kappa = 0.5.
    # bob-carol share p1 p3: (F,F) (T,S). p_o = 1/2.
    #   bob F1 T1, carol F1 S1: p_e = (1*1) / 4 = 1/4. kappa = (1/2 - 1/4) / (3/4) = 1/3.
    # The synthetic labels are not part of the panel.
    assert cohen_kappa_pairs(PANEL) == (
        KappaResult("alice", "bob", near(0.5), near(2 / 3), 3),
        KappaResult("alice", "carol", near(0.5), near(2 / 3), 3),
        KappaResult("bob", "carol", near(1 / 3), 0.5, 2),
    )


def test_cohen_kappa_agrees_with_the_two_by_two_closed_form() -> None:
    # Confusion matrix (alice rows, bob columns) over 10 pairs:
    #            bob F  bob S
    #   alice F    4      1
    #   alice S    2      3
    # Closed form for two categories: 2(ad - bc) / ((a+b)(b+d) + (a+c)(c+d))
    #   = 2(4*3 - 1*2) / (5*4 + 6*5) = 20 / 50 = 0.4.
    # Definition: p_o = 7/10, p_e = (5*6 + 5*4) / 100 = 0.5, (0.7 - 0.5) / 0.5 = 0.4.
    cells = [("F", "F")] * 4 + [("F", "S")] + [("S", "F")] * 2 + [("S", "S")] * 3
    labels = humans({f"q{i}": {"alice": x, "bob": y} for i, (x, y) in enumerate(cells)})
    a, b, c, d = 4, 1, 2, 3
    closed_form = 2 * (a * d - b * c) / ((a + b) * (b + d) + (a + c) * (c + d))
    [row] = cohen_kappa_pairs(labels)
    assert row.kappa == near(closed_form) == near(0.4)
    assert (row.agreement, row.n) == (near(0.7), 10)


def test_perfect_agreement_with_every_category_used() -> None:
    # Both say F, S, T on three pairs: p_o = 1, p_e = 3 * (1*1) / 9 = 1/3, kappa = 1.
    # Alpha: no off-diagonal coincidences, so D_o = 0 and alpha = 1.
    labels = humans({p: {"alice": c, "bob": c} for p, c in (("p1", "F"), ("p2", "S"), ("p3", "T"))})
    assert cohen_kappa_pairs(labels) == (KappaResult("alice", "bob", 1.0, 1.0, 3),)
    assert krippendorff_alpha(labels) == AlphaResult(near(1.0), 3)
    assert unanimity_share(labels) == ShareResult(1.0, 3)


def test_total_disagreement() -> None:
    # alice F S, bob S F. p_o = 0, p_e = (1*1 + 1*1) / 4 = 1/2, kappa = (0 - 1/2) / (1/2) = -1.
    # Alpha: each pair gives o_FS += 1 and o_SF += 1 (weight 1/(2-1)), so o_FS = o_SF = 2,
    # n_F = n_S = 2, n = 4. alpha = 1 - (n-1) * (o_FS + o_SF) / (n_F n_S + n_S n_F)
    #   = 1 - 3 * 4 / 8 = -0.5.
    labels = humans({"p1": {"alice": "F", "bob": "S"}, "p2": {"alice": "S", "bob": "F"}})
    assert cohen_kappa_pairs(labels) == (KappaResult("alice", "bob", -1.0, 0.0, 2),)
    assert krippendorff_alpha(labels) == AlphaResult(near(-0.5), 2)
    assert unanimity_share(labels) == ShareResult(0.0, 2)
    assert human_majorities(labels) == {(pair_of("p1"), None): None, (pair_of("p2"), None): None}


def test_one_shared_category_leaves_kappa_and_alpha_undefined_not_perfect() -> None:
    # Both always say "tie": p_e = (2*2) / 4 = 1 and p_o = 1, so kappa = 0/0 -> None (documented
    # choice), while raw agreement is 1.0. Alpha: one value only, D_e = 0 -> None.
    labels = humans({"p1": {"alice": "T", "bob": "T"}, "p2": {"alice": "T", "bob": "T"}})
    assert cohen_kappa_pairs(labels) == (KappaResult("alice", "bob", None, 1.0, 2),)
    assert krippendorff_alpha(labels) == AlphaResult(None, 2)
    assert unanimity_share(labels) == ShareResult(1.0, 2)
    json.dumps(agreement_report(labels), allow_nan=False)


def test_annotators_who_never_overlap_get_a_row_with_n_zero() -> None:
    labels = humans({"p1": {"alice": "F"}, "p2": {"bob": "S"}})
    assert cohen_kappa_pairs(labels) == (KappaResult("alice", "bob", None, None, 0),)
    assert krippendorff_alpha(labels) == AlphaResult(None, 0)
    assert unanimity_share(labels) == ShareResult(None, 0)


def test_alpha_needs_two_annotators_on_one_pair() -> None:
    assert krippendorff_alpha(humans({"p1": {"alice": "F"}, "p2": {"alice": "S"}})) == AlphaResult(
        None, 0
    )
    assert krippendorff_alpha([]) == AlphaResult(None, 0)


def test_krippendorff_alpha_on_the_panel_by_hand() -> None:
    # Coincidences: every ordered pair of values from different coders in a pair, weight
    # 1 / (m - 1) with m the number of labels on that pair; p5 (m = 1) is not pairable.
    #   p1 F F F: 6 ordered (F,F) pairs x 1/2 -> o_FF += 3
    #   p2 F S:   (F,S) (S,F) x 1           -> o_FS += 1, o_SF += 1
    #   p3 T T S: (T,T) x2, (T,S) x2, (S,T) x2, each x 1/2 -> o_TT += 1, o_TS += 1, o_ST += 1
    #   p4 S S:   (S,S) x2 x 1              -> o_SS += 2
    #         F  S  T
    #    F    3  1  0    n_F = 4
    #    S    1  2  1    n_S = 4
    #    T    0  1  1    n_T = 2        n = 10
    # Observed disagreement: off-diagonal sum 4. Expected: sum over c != k of n_c n_k
    #   = 100 - (16 + 16 + 4) = 64. alpha = 1 - (n - 1) * 4 / 64 = 1 - 36/64 = 0.4375.
    assert krippendorff_alpha(PANEL) == AlphaResult(near(0.4375), 4)


@pytest.mark.parametrize(
    ("votes", "majority"),
    [
        (["first"], "first"),  # one label is its pair's majority
        (["first", "second"], None),  # 1-1 split
        (["tie", "tie"], "tie"),  # ties are a category like the others
        (["first", "first", "second"], "first"),  # 2 of 3
        (["tie", "tie", "first"], "tie"),
        (["first", "second", "tie"], None),  # 1-1-1: a plurality is not a majority
        (["first", "first", "second", "second"], None),  # 2 of 4 is not more than half
        (["second", "second", "second", "tie"], "second"),
        ([], None),
    ],
)
def test_majority_vote_needs_more_than_half(votes: list[str], majority: str | None) -> None:
    assert majority_vote(votes) == majority  # type: ignore[arg-type]


def test_human_majorities_on_the_panel() -> None:
    # p2 is a 1-1 split: no majority. p5's single label is its majority.
    assert human_majorities(PANEL) == {
        (pair_of("p1"), None): "first",
        (pair_of("p2"), None): None,
        (pair_of("p3"), None): "tie",
        (pair_of("p4"), None): "second",
        (pair_of("p5"), None): "first",
    }


def test_unanimity_excludes_the_pair_one_human_labeled() -> None:
    # Pairs with >= 2 human labels: p1 (F F F, unanimous), p2 (split), p3 (T T S), p4 (S S,
    # unanimous). p5 has one label and is left out: 2 / 4.
    assert unanimity_share(PANEL) == ShareResult(0.5, 4)


def test_provider_agreement_on_the_panel() -> None:
    # Synthetic vs the human majority: p1 F = F, p3 S != T, p4 S = S, p5 F = F (alice's lone
    # label) -> 3/4. p2 (a 1-1 split) has no majority and is not counted.
    # Leave-one-out for each human:
    #   alice: p1 others F F -> F, agrees; p2 other S, disagrees; p3 others T S -> split;
    #          p4 other S, agrees; p5 no others. 2/3
    #   bob:   p1 agrees; p2 other F, bob S disagrees; p3 others T S -> split. 1/2
    #   carol: p1 agrees; p3 others T T -> T, carol S disagrees; p4 other S, agrees. 2/3
    assert provider_agreement(PANEL) == (
        ProviderAgreement("synthetic", "human_majority", 0.75, 4),
        ProviderAgreement("human:alice", "human_majority_without_self", near(2 / 3), 3),
        ProviderAgreement("human:bob", "human_majority_without_self", 0.5, 2),
        ProviderAgreement("human:carol", "human_majority_without_self", near(2 / 3), 3),
    )


def test_leave_one_out_compares_each_human_with_the_others_only() -> None:
    # q1: alice F, bob F, carol S, dave S. All four: 2-2, no majority, so the judge is not
    #   counted there. Leave-one-out: alice's others F S S -> S, alice disagrees; bob likewise;
    #   carol's others F F S -> F, carol disagrees; dave likewise. Everyone 0/1 on q1.
    # q2: alice T, bob T, carol T, dave F. alice's others T T F -> T, agrees (bob, carol too);
    #   dave's others T T T -> T, dave disagrees.
    # Totals: alice, bob, carol 1/2; dave 0/2. Judge: q2 F vs majority T -> 0/1.
    labels = [
        *humans(
            {
                "q1": {"alice": "F", "bob": "F", "carol": "S", "dave": "S"},
                "q2": {"alice": "T", "bob": "T", "carol": "T", "dave": "F"},
            }
        ),
        lab("q1", "opus", "F", "judge"),
        lab("q2", "opus", "F", "judge"),
    ]
    assert provider_agreement(labels) == (
        ProviderAgreement("judge", "human_majority", 0.0, 1),
        ProviderAgreement("human:alice", "human_majority_without_self", 0.5, 2),
        ProviderAgreement("human:bob", "human_majority_without_self", 0.5, 2),
        ProviderAgreement("human:carol", "human_majority_without_self", 0.5, 2),
        ProviderAgreement("human:dave", "human_majority_without_self", 0.0, 2),
    )


def test_with_two_humans_each_is_compared_with_the_other() -> None:
    # Leave-one-out leaves the other person's label, which is that pair's majority: alice and
    # bob agree on p1 and p2 (2/2) and split on p3, so each scores 2/3 against the other.
    labels = humans(
        {
            "p1": {"alice": "F", "bob": "F"},
            "p2": {"alice": "S", "bob": "S"},
            "p3": {"alice": "F", "bob": "T"},
        }
    )
    assert provider_agreement(labels) == (
        ProviderAgreement("human:alice", "human_majority_without_self", near(2 / 3), 3),
        ProviderAgreement("human:bob", "human_majority_without_self", near(2 / 3), 3),
    )


def test_provider_agreement_by_the_confidence_of_the_provider_label() -> None:
    # Synthetic at confidence 2: p1 agrees, p2 no majority, p3 disagrees -> 1/2.
    # Synthetic at confidence 1: p4 agrees, p5 agrees with alice's lone label -> 2/2.
    # The human labels have no confidence, so their rows fall in the None group.
    groups = provider_agreement_by_confidence(PANEL)
    assert [group.confidence for group in groups] == [1, 2, None]
    by_level = {group.confidence: group.providers for group in groups}
    assert by_level[1] == (ProviderAgreement("synthetic", "human_majority", 1.0, 2),)
    assert by_level[2] == (ProviderAgreement("synthetic", "human_majority", 0.5, 2),)
    assert [row.provider for row in by_level[None]] == ["human:alice", "human:bob", "human:carol"]


def test_human_confidence_selects_the_group_but_the_majority_uses_every_label() -> None:
    # p1: alice F (certain, 2), bob F (guess, 0), carol S (guess, 0).
    # alice's others F S -> split; bob's others F S -> split; carol's others F F -> F, disagrees.
    # So only carol is counted, in the guess group: 0/1. The certain group holds alice with n 0.
    labels = [
        lab("p1", "alice", "F", confidence=2),
        lab("p1", "bob", "F", confidence=0),
        lab("p1", "carol", "S", confidence=0),
    ]
    by_level = {g.confidence: g.providers for g in provider_agreement_by_confidence(labels)}
    assert by_level[0] == (
        ProviderAgreement("human:bob", "human_majority_without_self", None, 0),
        ProviderAgreement("human:carol", "human_majority_without_self", 0.0, 1),
    )
    assert by_level[2] == (
        ProviderAgreement("human:alice", "human_majority_without_self", None, 0),
    )


DIMENSIONS = [
    lab("p1", "alice", "F"),
    lab("p1", "bob", "F"),
    lab("p1", "alice", "F", dimension="tone"),
    lab("p1", "bob", "S", dimension="tone"),
    lab("p2", "alice", "T", dimension="tone"),
    lab("p2", "bob", "T", dimension="tone"),
    lab("p2", "opus", "T", "judge", dimension="tone"),
]


def test_each_dimension_is_its_own_item_and_its_own_breakdown() -> None:
    # Items: (p1, none), (p1, tone), (p2, tone). Pooled unanimity: (p1, none) F F yes,
    # (p1, tone) F S no, (p2, tone) T T yes -> 2/3.
    # "(none)": one item, unanimous: 1/1. Kappa alice-bob: p_o = 1, p_e = 1 -> None.
    # "tone": (F,S) (T,T): p_o = 1/2; alice F1 T1, bob S1 T1: p_e = (1*1) / 4 = 1/4;
    #   kappa = (1/2 - 1/4) / (3/4) = 1/3. Judge on (p2, tone): T vs majority T -> 1/1.
    report = agreement_report(DIMENSIONS)
    assert (report["pairs"], report["unanimous_share"]) == (3, near(2 / 3))
    none, tone = report["by_dimension"]
    assert none["dimension"] == "(none)"
    assert (none["pairs"], none["unanimous_share"]) == (1, 1.0)
    assert none["cohen_kappa"] == [
        {"a": "alice", "b": "bob", "kappa": None, "agreement": 1.0, "n": 1}
    ]
    assert tone["dimension"] == "tone"
    assert (tone["pairs"], tone["unanimous_share"]) == (2, 0.5)
    assert tone["cohen_kappa"][0]["kappa"] == near(1 / 3)
    assert tone["providers"][0] == {
        "provider": "judge",
        "vs": "human_majority",
        "agreement": 1.0,
        "n": 1,
    }


def test_report_for_one_dimension_keeps_only_its_labels() -> None:
    report = agreement_report(DIMENSIONS, dimension="tone")
    assert (report["pairs"], report["unanimous_share"]) == (2, 0.5)
    assert [row["dimension"] for row in report["by_dimension"]] == ["tone"]
    assert agreement_report(DIMENSIONS, dimension="accuracy")["pairs"] == 0


def test_report_has_the_formats_shape_and_is_strict_json() -> None:
    report = agreement_report([*PANEL, lab("p9", "opus", "F", "judge")])
    # p9 has only a judge label: not a human-labeled pair, and the judge has no majority to meet.
    assert report["pairs"] == 5
    assert report["annotators"] == 3
    assert report["overlap_pairs"] == 4
    assert report["krippendorff_alpha"] == near(0.4375)
    assert report["unanimous_share"] == 0.5
    assert set(report["cohen_kappa"][0]) == {"a", "b", "kappa", "agreement", "n"}
    assert report["providers"][0] == {
        "provider": "synthetic",
        "vs": "human_majority",
        "agreement": 0.75,  # as in test_provider_agreement_on_the_panel
        "n": 4,
    }
    assert report["providers"][1] == {
        "provider": "judge",
        "vs": "human_majority",
        "agreement": None,
        "n": 0,
    }
    assert {"confidence", "providers"} == set(report["by_confidence"][0])
    assert json.loads(json.dumps(report, allow_nan=False))["pairs"] == 5


def test_report_on_no_labels_is_all_none_and_zero() -> None:
    assert agreement_report([]) == {
        "pairs": 0,
        "annotators": 0,
        "overlap_pairs": 0,
        "krippendorff_alpha": None,
        "unanimous_share": None,
        "cohen_kappa": [],
        "providers": [],
        "by_confidence": [],
        "by_dimension": [],
    }


def test_summary_dataclass_matches_the_report() -> None:
    summary = agreement_summary(PANEL)
    assert (summary.pairs, summary.annotators) == (5, 3)
    assert summary.unanimity == ShareResult(0.5, 4)
    assert summary.providers == provider_agreement(PANEL)


def test_annotator_summaries() -> None:
    # Seconds: alice 10, 30 and one unrecorded -> median 20 over 2; bob 5, 100 -> 52.5;
    # carol none recorded -> None. The synthetic label is not an annotator's work.
    labels = [
        lab("p1", "alice", "F", confidence=2, seconds=10),
        lab("p1", "bob", "F", confidence=1, seconds=5),
        lab("p1", "carol", "F", confidence=0),
        lab("p2", "alice", "F", confidence=2, seconds=30),
        lab("p2", "bob", "S", confidence=1, seconds=100),
        lab("p2", "carol", "S", confidence=0),
        lab("p3", "alice", "T"),
        lab("p2", "gen", "S", "synthetic", seconds=1),
    ]
    # Leave-one-out on p2 (alice F, bob S, carol S): alice's others S S -> S, disagrees;
    # bob's others F S -> split; carol's others F S -> split. p3 has one label: no one counted.
    # alice: p1 agrees, p2 disagrees -> 1/2. bob: p1 -> 1/1. carol: p1 -> 1/1.
    alice, bob, carol = annotator_summaries(labels)
    assert (alice.annotator, alice.labels, alice.median_seconds, alice.seconds_n) == (
        "alice",
        3,
        20.0,
        2,
    )
    assert (alice.agreement, alice.n) == (0.5, 2)
    assert alice.confidence == {0: 0, 1: 0, 2: 2, None: 1}
    assert (bob.labels, bob.median_seconds, bob.agreement, bob.n) == (2, 52.5, 1.0, 1)
    assert bob.confidence == {0: 0, 1: 2, 2: 0, None: 0}
    assert (carol.median_seconds, carol.seconds_n, carol.agreement, carol.n) == (None, 0, 1.0, 1)
    assert carol.confidence == {0: 2, 1: 0, 2: 0, None: 0}


def _panel_labels(annotators: int, pairs: int) -> list[Label]:
    labels = []
    for i in range(pairs):
        for j in range(annotators):
            winner = f"p{i:02d}b" if (i + j) % 3 == 0 else f"p{i:02d}a"
            pair = (f"p{i:02d}a", f"p{i:02d}b")
            labels.append(Label(pair, None, f"ann{j}", "human", winner))
    return labels


def test_panel_report_shows_figures_only_above_both_minimums() -> None:
    enough = panel_report(_panel_labels(PANEL_MIN_ANNOTATORS, PANEL_MIN_OVERLAP_PAIRS))
    assert enough["shown"] and enough["krippendorff_alpha"] is not None
    assert enough["unanimous_share"] is not None
    assert set(enough) >= {"pairs", "annotators", "overlap_pairs", "by_dimension"}
    assert "cohen_kappa" not in enough and "providers" not in enough
    for labels in (
        _panel_labels(PANEL_MIN_ANNOTATORS - 1, 40),
        _panel_labels(PANEL_MIN_ANNOTATORS, PANEL_MIN_OVERLAP_PAIRS - 1),
    ):
        withheld = panel_report(labels)
        assert not withheld["shown"]
        assert (withheld["krippendorff_alpha"], withheld["unanimous_share"]) == (None, None)
