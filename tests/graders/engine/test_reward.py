"""Reward expressions: parsing into a typed tree, evaluation, and errors that name their path."""

from typing import Any

import pytest

from graders.engine.reward import (
    MAX_DEPTH,
    Clip,
    Combine,
    Const,
    Ref,
    RewardError,
    RewardInvalid,
    WeightedMean,
    reward_evaluate,
    reward_parse,
    reward_refs,
    reward_to_json,
)

OUTPUTS = {
    "verify": {"score": 0.9, "passed": True},
    "fresh": {"score": 0.6, "level": 7},
}


def test_parse_builds_a_typed_tree() -> None:
    expr = reward_parse(
        {
            "clip": [
                {"weighted_mean": [["verify.score", 2], [{"max": ["fresh.score", 0.5]}, 1]]},
                0,
                1,
            ]
        }
    )

    assert expr == Clip(
        WeightedMean(
            (
                (Ref("verify", "score"), 2.0),
                (Combine("max", (Ref("fresh", "score"), Const(0.5))), 1.0),
            )
        ),
        0.0,
        1.0,
    )


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        (0.25, 0.25),
        ("verify.score", 0.9),
        ({"mean": ["verify.score", "fresh.score"]}, 0.75),
        ({"weighted_mean": [["verify.score", 2], ["fresh.score", 1]]}, (2 * 0.9 + 0.6) / 3),
        ({"min": ["verify.score", "fresh.score", 0.7]}, 0.6),
        ({"max": ["verify.score", "fresh.score"]}, 0.9),
        ({"clip": ["fresh.level", 0, 1]}, 1.0),
        ({"clip": [{"mean": ["fresh.level", -9]}, 0, 1]}, 0.0),
        ({"mean": [{"min": ["verify.score", 0.5]}, {"max": ["fresh.score", 0.8]}]}, 0.65),
    ],
)
def test_evaluate_by_hand(expression: Any, value: float) -> None:
    assert reward_evaluate(reward_parse(expression), OUTPUTS) == pytest.approx(value)


def test_refs_are_listed_with_their_paths() -> None:
    expr = reward_parse(
        {"mean": ["a.x", {"weighted_mean": [["b.y", 1], [{"clip": ["c.z", 0, 1]}, 2]]}]}
    )

    assert list(reward_refs(expr)) == [
        ("reward.mean[0]", Ref("a", "x")),
        ("reward.mean[1].weighted_mean[0][0]", Ref("b", "y")),
        ("reward.mean[1].weighted_mean[1][0].clip[0]", Ref("c", "z")),
    ]


@pytest.mark.parametrize(
    ("expression", "messages"),
    [
        (
            {"avg": ["a.x"]},
            ["reward: unknown operator 'avg'; use one of mean, weighted_mean, min, max, clip"],
        ),
        ({"mean": []}, ["reward.mean: expected a non-empty list of arguments; got []"]),
        ({"mean": "a.x"}, ['reward.mean: expected a non-empty list of arguments; got "a.x"']),
        ("score", ["reward: 'score' is not a reference of the form \"step.field\""]),
        ("a.b.c", ["reward: 'a.b.c' is not a reference of the form \"step.field\""]),
        (
            True,
            [
                'reward: expected a number, a reference like "step.field" or an object with one operator (mean, weighted_mean, min, max, clip); got true'
            ],
        ),
        (
            {"mean": ["a.x"], "max": ["a.x"]},
            [
                'reward: expected a number, a reference like "step.field" or an object with one operator (mean, weighted_mean, min, max, clip); got {"mean": ["a.x"], "max": ["a.x"]}'
            ],
        ),
        (
            {"weighted_mean": [["a.x", 0], ["b.y"]]},
            [
                "reward.weighted_mean[0][1]: the weight must be a positive number, got 0",
                'reward.weighted_mean[1]: expected a pair [expression, weight]; got ["b.y"]',
            ],
        ),
        (
            {"weighted_mean": [["a.x", "b.y"]]},
            ['reward.weighted_mean[0][1]: the weight must be a positive number, got "b.y"'],
        ),
        (
            {"clip": ["a.x", 1, 0]},
            ["reward.clip: low and high must be numbers with low <= high; got 1, 0"],
        ),
        ({"clip": ["a.x", 0]}, ["reward.clip: expected [expression, low, high]; got 2 arguments"]),
        (
            {"clip": ["a.x", "b.y", 1]},
            ['reward.clip: low and high must be numbers with low <= high; got "b.y", 1'],
        ),
        (
            float("nan"),
            [
                'reward: expected a number, a reference like "step.field" or an object with one operator (mean, weighted_mean, min, max, clip); got NaN'
            ],
        ),
        (
            {"mean": ["bad", {"max": [{"min": []}]}]},
            [
                "reward.mean[0]: 'bad' is not a reference of the form \"step.field\"",
                "reward.mean[1].max[0].min: expected a non-empty list of arguments; got []",
            ],
        ),
    ],
)
def test_invalid_expressions_name_every_problem_with_its_path(
    expression: Any, messages: list[str]
) -> None:
    with pytest.raises(RewardInvalid) as raised:
        reward_parse(expression)

    assert raised.value.messages == messages


def test_code_in_a_reference_is_never_evaluated() -> None:
    with pytest.raises(RewardInvalid, match="is not a reference"):
        reward_parse("__import__('os').system('true')")


def test_deep_nesting_is_refused() -> None:
    expression: Any = "a.x"
    for _ in range(MAX_DEPTH + 1):
        expression = {"max": [expression]}

    with pytest.raises(RewardInvalid, match=f"nested deeper than {MAX_DEPTH} levels"):
        reward_parse(expression)


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ({"verify": {"score": 0.9}}, "reward.mean[1]: fresh.score is null, not a finite number"),
        (
            {"verify": {"score": 0.9}, "fresh": {"score": True}},
            "reward.mean[1]: fresh.score is true, not a finite number",
        ),
        (
            {"verify": {"score": 0.9}, "fresh": {"score": "0.8"}},
            'reward.mean[1]: fresh.score is "0.8", not a finite number',
        ),
    ],
)
def test_evaluation_errors_name_the_path(outputs: Any, message: str) -> None:
    expr = reward_parse({"mean": ["verify.score", "fresh.score"]})

    with pytest.raises(RewardError) as raised:
        reward_evaluate(expr, outputs)

    assert str(raised.value) == message


def test_to_json_round_trips() -> None:
    data = {"clip": [{"weighted_mean": [["a.x", 2.0], [{"min": ["b.y", 0.5]}, 1.0]]}, 0.0, 1.0]}

    expr = reward_parse(data)

    assert reward_to_json(expr) == data
    assert reward_parse(reward_to_json(expr)) == expr
