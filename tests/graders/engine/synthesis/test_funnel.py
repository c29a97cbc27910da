"""The funnel arithmetic pinned on a tiny synthesis computed by hand (no database).

Cascade j1, j2; retries 2. Five cells (dimension, domain, contrast, agent):

  c1 F  airline bad-ok  A   r0 vetoed by j2 (j1 ab, j2 ba) cost .10; r1 kept (ab, ab) .20
  c2 F  retail  ok-good B   r0 kept (j1 ba, j2 ab) .30
  c3 C  airline bad-good A  r0 vetoed by j1 (ab) .10; r1 j1 no verdict (ab) .10;
                            r2 vetoed by j2 (j1 ba, j2 ab) .10
  c4 C  airline bad-ok  B   no draw (its steering failed)
  c5 C  retail  ok-good A   r0 failed, no votes, .05

Per retry: r0 draws c1 c2 c3 c5 = 4, kept 1 (c2), j1 rejects c3, j2 rejects c1, 1 failed,
retention 1/4, cumulative 1/5. r1: c1 c3 = 2, kept 1 (c1), j1 rejects c3 (no verdict is a
veto), retention 1/2, cumulative (1+1)/5. r2: c3 = 1, kept 0, j2 rejects, retention 0,
cumulative 2/5. Total: 7 draws, 2 kept, j1 2 and j2 2 rejections, retention 2/7, cumulative
2/5. Cost .95 over 2 kept = .475.
"""

import pytest

from graders.engine.synthesis.funnel import (
    Cell,
    Draw,
    StageUsage,
    SynthesisRun,
    Vote,
    binomial_two_sided_p,
    funnel_compute,
)


def votes(*pairs: tuple[str, bool | None, str]) -> tuple[Vote, ...]:
    return tuple(Vote(judge, agrees, slot) for judge, agrees, slot in pairs)


RUN = SynthesisRun(
    judges=("j1", "j2"),
    retries=2,
    cells=(
        Cell("c1", "F", "airline", "bad-ok", "A", (
            Draw(0, "vetoed", 0.10, votes(("j1", True, "ab"), ("j2", False, "ba")), {
                "steer": StageUsage(1, 30), "rollout": StageUsage(2, 100),
                "filter": StageUsage(2, 50)}),
            Draw(1, "kept", 0.20, votes(("j1", True, "ab"), ("j2", True, "ab")), {
                "rollout": StageUsage(2, 120), "filter": StageUsage(2, None)}),
        )),
        Cell("c2", "F", "retail", "ok-good", "B", (
            Draw(0, "kept", 0.30, votes(("j1", True, "ba"), ("j2", True, "ab"))),
        )),
        Cell("c3", "C", "airline", "bad-good", "A", (
            Draw(0, "vetoed", 0.10, votes(("j1", False, "ab"))),
            Draw(1, "vetoed", 0.10, votes(("j1", None, "ab"))),
            Draw(2, "vetoed", 0.10, votes(("j1", True, "ba"), ("j2", False, "ab"))),
        )),
        Cell("c4", "C", "airline", "bad-ok", "B", ()),
        Cell("c5", "C", "retail", "ok-good", "A", (Draw(0, "failed", 0.05),)),
    ),
)  # fmt: skip


def test_table_1_per_retry_and_in_total() -> None:
    funnel = funnel_compute(RUN).as_json()
    assert (funnel["cells"], funnel["draws"], funnel["kept"]) == (5, 7, 2)
    rows = [
        (r["retry"], r["draws"], r["kept"], r["rejected"], r["failed"], r["retention"],
         r["cumulative_retention"])
        for r in funnel["by_retry"]
    ]  # fmt: skip
    assert rows == [
        (0, 4, 1, {"j1": 1, "j2": 1}, 1, 1 / 4, 1 / 5),
        (1, 2, 1, {"j1": 1, "j2": 0}, 0, 1 / 2, 2 / 5),
        (2, 1, 0, {"j1": 0, "j2": 1}, 0, 0.0, 2 / 5),
    ]
    assert funnel["total"] == {
        "draws": 7, "kept": 2, "rejected": {"j1": 2, "j2": 2}, "failed": 1, "pending": 0,
        "retention": 2 / 7, "cumulative_retention": 2 / 5,
    }  # fmt: skip
    assert funnel["cost"] == pytest.approx(0.95)
    assert funnel["cost_per_kept"] == pytest.approx(0.475)


def test_table_8_by_dimension_domain_contrast_and_agent() -> None:
    # (value, cells, filled, draws, retention = filled/draws, cumulative = filled/cells,
    # draws per kept = draws/filled)
    by = funnel_compute(RUN).as_json()["by"]
    table = {
        axis: [
            (r["value"], r["cells"], r["filled"], r["draws"], r["retention"],
             r["cumulative_retention"], r["draws_per_kept"])
            for r in rows
        ]
        for axis, rows in by.items()
    }  # fmt: skip
    assert table == {
        # C: c3 c4 c5, nothing kept, 3 + 0 + 1 draws. F: c1 c2, both kept, 2 + 1 draws.
        "dimension": [("C", 3, 0, 4, 0.0, 0.0, None), ("F", 2, 2, 3, 2 / 3, 1.0, 1.5)],
        # airline: c1 c3 c4 (c1 kept), 2 + 3 draws. retail: c2 c5 (c2 kept), 1 + 1 draws.
        "domain": [("airline", 3, 1, 5, 1 / 5, 1 / 3, 5.0), ("retail", 2, 1, 2, 1 / 2, 1 / 2, 2.0)],
        "contrast": [
            ("bad-good", 1, 0, 3, 0.0, 0.0, None),  # c3
            ("bad-ok", 2, 1, 2, 1 / 2, 1 / 2, 2.0),  # c1 (kept, 2 draws), c4 (none)
            ("ok-good", 2, 1, 2, 1 / 2, 1 / 2, 2.0),  # c2 (kept), c5 (failed)
        ],
        # A: c1 c3 c5, 2 + 3 + 1 draws, c1 kept. B: c2 c4, one draw, kept.
        "agent": [("A", 3, 1, 6, 1 / 6, 1 / 3, 6.0), ("B", 2, 1, 1, 1.0, 1 / 2, 1.0)],
    }
    assert by["dimension"][0]["rejected"] == {"j1": 2, "j2": 1}


def test_calls_and_tokens_per_stage_per_kept_pair() -> None:
    stages = {s["stage"]: s for s in funnel_compute(RUN).as_json()["stages"]}
    # filter: 2 + 2 calls, but one draw gave no tokens, so the total is unknown.
    assert stages["filter"] == {
        "stage": "filter", "calls": 4, "tokens": None, "calls_per_kept": 2.0,
        "tokens_per_kept": None,
    }  # fmt: skip
    assert stages["rollout"] == {
        "stage": "rollout", "calls": 4, "tokens": 220, "calls_per_kept": 2.0,
        "tokens_per_kept": 110.0,
    }  # fmt: skip
    assert (stages["steer"]["calls"], stages["steer"]["tokens_per_kept"]) == (1, 15.0)


def test_position_audit_per_subset() -> None:
    # Ten votes; 'ab' (better response in slot 2) on seven of them: c1 r0 j1, c1 r1 j1 j2,
    # c2 j2, c3 r0 j1, c3 r1 j1, c3 r2 j2. Two-sided p = 2 * P(X <= 3 | n=10) =
    # 2 * (1 + 10 + 45 + 120) / 1024 = 0.34375.
    rows = {(r["axis"], r["value"]): r for r in funnel_compute(RUN).as_json()["position"]}
    picked = {
        k: (r["votes"], r["better_in_slot_2"], r["share"], r["p_value"]) for k, r in rows.items()
    }
    assert picked[("all", "all")] == (10, 7, 0.7, 0.34375)
    # j1: 6 votes, 4 'ab': p = 2 * (1 + 6 + 15) / 64. j2: 4 votes, 3 'ab': p = 2 * 5 / 16.
    assert picked[("judge", "j1")] == (6, 4, 4 / 6, 44 / 64)
    assert picked[("judge", "j2")] == (4, 3, 0.75, 10 / 16)
    assert picked[("dimension", "C")] == (4, 3, 0.75, 10 / 16)
    assert picked[("dimension", "F")] == (6, 4, 4 / 6, 44 / 64)
    # c5's failed draw has no votes and c4 no draws: the audit only counts votes.
    assert picked[("agent", "B")] == (2, 1, 0.5, 1.0)
    assert [k for k in rows if k[0] == "judge"] == [("judge", "j1"), ("judge", "j2")]


def test_votes_without_a_slot_order_are_left_out_of_the_audit() -> None:
    run = SynthesisRun(("j1",), 0, (Cell("c", "F", "d", "bad-ok", "A", (
        Draw(0, "kept", votes=votes(("j1", True, ""))),)),))  # fmt: skip
    audit = funnel_compute(run).as_json()["position"][0]
    assert (audit["votes"], audit["share"], audit["p_value"]) == (0, None, None)


def test_an_empty_synthesis_has_no_ratios() -> None:
    funnel = funnel_compute(SynthesisRun(("j1",), 1, ())).as_json()
    assert funnel["total"]["retention"] is None and funnel["cost_per_kept"] is None
    assert [r["retry"] for r in funnel["by_retry"]] == [0, 1]
    assert all(r["cumulative_retention"] is None for r in funnel["by_retry"])


def test_an_unknown_outcome_is_refused() -> None:
    run = SynthesisRun(("j1",), 0, (Cell("c", "F", "d", "bad-ok", "A", (Draw(0, "won"),)),))
    with pytest.raises(ValueError, match="unknown draw outcome 'won'"):
        funnel_compute(run)


@pytest.mark.parametrize(("k", "n"), [(0, 0), (0, 1), (3, 10), (5, 10), (9, 10), (40, 61)])
def test_binomial_p_matches_scipy(k: int, n: int) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    expected = 1.0 if n == 0 else scipy_stats.binomtest(k, n, 0.5).pvalue
    assert binomial_two_sided_p(k, n) == pytest.approx(expected)
