"""The PADME release layout (blind dataset + answers) written and read back, no database."""

import pytest

from graders.engine.synthesis.release import (
    BLIND_KEYS,
    ReleaseInvalid,
    ReleasePair,
    better_second,
    release_files,
    release_parse,
)

PAIR = ReleasePair(
    id="c1", criterion_name="friendliness", criterion_description="Warmth.", prompt="Context",
    low_text="cold", high_text="warm", low_level="bad", high_level="good", agent="m-a",
    group_id="t1/friendliness", low_hint="be cold", high_hint="be warm", task="t1",
    domain="airline", low_response="t1/bad", high_response="t1/good",
)  # fmt: skip


def test_the_blind_file_holds_only_texts_and_the_answers_name_the_better_slot() -> None:
    blind, answers = release_files([PAIR], seed=0)
    assert set(blind[0]) == set(BLIND_KEYS)
    second = better_second("c1", 0)
    assert blind[0]["response_2" if second else "response_1"] == "warm"
    assert answers[0]["correct_response"] == (2 if second else 1)
    assert answers[0]["levels"] == (["bad", "good"] if second else ["good", "bad"])
    assert answers[0]["responses"] == (["t1/bad", "t1/good"] if second else ["t1/good", "t1/bad"])
    assert (answers[0]["positive_hint"], answers[0]["negative_hint"]) == ("be warm", "be cold")
    assert release_parse(blind, answers) == [PAIR]


def test_the_slot_order_is_a_seeded_coin_per_pair() -> None:
    ids = [f"c{n}" for n in range(200)]
    seconds = [better_second(i, 0) for i in ids]
    assert seconds == [better_second(i, 0) for i in ids]  # fixed by seed and id
    assert 70 < sum(seconds) < 130  # a fair coin, not one side
    assert seconds != [better_second(i, 1) for i in ids]


def test_a_padme_style_answer_without_our_extensions_reads() -> None:
    blind = [
        {
            "id": "u1",
            "criterion_name": "clarity",
            "criterion_description": "Clear.",
            "prompt": "Tools...",
            "response_1": "A text",
            "response_2": "B text",
        }
    ]
    answers = [{"id": "u1", "correct_response": 1, "levels": ["ok", "bad"],
                "positive_hint": "<behaviour>...", "negative_hint": "", "group_id": "g-1",
                "agent": "gpt-oss-20b"}]  # fmt: skip
    (pair,) = release_parse(blind, answers)
    assert (pair.high_text, pair.high_level, pair.low_text, pair.low_level) == (
        "A text", "ok", "B text", "bad",
    )  # fmt: skip
    assert (pair.task, pair.low_response, pair.group_id) == ("", "", "g-1")


def test_every_problem_is_named_by_file_item_and_field() -> None:
    blind = [
        {"id": "u1", "criterion_name": "c", "prompt": "p", "response_1": "a", "response_2": "b"},
        {"id": "u2", "criterion_name": "c", "prompt": "p", "response_1": "a"},
        {"id": "u1"},
        "nope",
    ]
    answers = [
        {"id": "u1", "correct_response": 1, "levels": ["bad", "good"]},
        {"id": "u2", "correct_response": 3, "levels": ["ok", "ok"]},
        {"id": "u3", "correct_response": 1, "levels": ["bad", "ok"]},
    ]
    with pytest.raises(ReleaseInvalid) as info:
        release_parse(blind, answers)
    assert info.value.problems == [
        "blind dataset item 3 (u1): id: repeats item 1",
        "blind dataset item 4: must be an object",
        "answers item 3 (u3): id: no blind item has it",
        "answers item 1 (u1): correct_response: slot 1 holds 'bad', the lower level",
        "blind dataset item 2 (u2): response_2: missing",
        "answers item 2 (u2): correct_response: must be 1 or 2",
        "answers item 2 (u2): levels: two different levels of bad, ok, good",
    ]
    with pytest.raises(ReleaseInvalid, match="blind dataset: must be a JSON list of objects"):
        release_parse({"id": "x"}, [])
