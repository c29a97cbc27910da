"""The export runtime: bundles (graders/engine/bundle.py) and the trainer adapters
(graders/engine/trainers/), against the fake judge over real HTTP. No Django, no database.

The fake judge scores by a quality word in the response (excellent 1.0, good 0.75, fair 0.5,
poor 0.25), compares two responses by the same words, writes GENERATED_CRITERIA as a rubric
and checks a criterion by its keyword. Expected rewards are computed twice: by hand in the
comments, and by calling the programs' grading functions directly the way
graders/grading.py does (`reference_rewards`), which is what the adapters must reproduce."""

import asyncio
import copy
import json
import pickle
import re
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from graders.engine.judge import JudgeClient, JudgeSettings, MissingApiKey
from graders.engine.programs import (
    PAIRWISE_KINDS,
    Criterion,
    DocumentInput,
    Grade,
    Program,
    ResponseInput,
    TaskInput,
    grade_group_pairwise,
    grade_rubric,
    grade_scalar,
    program_validate,
    rubric_generate,
)
from graders.engine.runtime import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    BundleInvalid,
    Grader,
    TRLReward,
    load_bundle,
    openrlhf_reward_func,
    prompt_text,
    response_input,
    verl_compute_score,
    verl_compute_score_async,
)
from tests.fakes.openai_server import FakeJudgeServer

QUALITY = {"excellent": 1.0, "good": 0.75, "fair": 0.5, "poor": 0.25}
GENERATED_CRITERIA = [
    {"text": "Names the notice period", "weight": 3},
    {"text": "Reads as excellent work", "weight": 1},
]
KEYWORDS = {
    "Names the notice period": "notice",
    "Reads as excellent work": "excellent",
    "Cites clause 9": "clause 9",
}
UNREADABLE = "unreadable"

SCALAR: dict[str, Any] = {
    "kind": "scalar",
    "name": "Quality Score",
    "steps": [
        {
            "id": "grade",
            "prompt": "Score the response from 0 to 1.\n\nTask:\n{task.prompt}\n\n"
            "Documents:\n{documents}\n\nResponse:\n{response}",
            "output": {"score": "float[0,1]"},
        }
    ],
    "reward": "grade.score",
}
PAIRWISE: dict[str, Any] = {
    "kind": "pairwise",
    "name": "quality-compare",
    "steps": [
        {
            "id": "compare",
            "prompt": "Which response does the task better?\n\nTask:\n{task.prompt}\n\n"
            "Response A:\n{response_a}\n\nResponse B:\n{response_b}",
            "output": {"winner": "enum[a,b,tie]"},
        }
    ],
}
RUBRIC_WRITER: dict[str, Any] = {
    "id": "rubric",
    "prompt": "Write a rubric.\n\nTask:\n{task.prompt}\n\nDocuments:\n{documents}",
    "output": {"criteria": "list[criterion]"},
}
RUBRIC: dict[str, Any] = {
    "kind": "rubric",
    "name": "rubric-check",
    "steps": [
        RUBRIC_WRITER,
        {
            "id": "check",
            "prompt": "Is the criterion met?\n\nCriterion:\n{criterion}\n\nResponse:\n{response}",
            "output": {"verdict": "bool"},
        },
    ],
}
PAIRWISE_RUBRIC: dict[str, Any] = {
    "kind": "pairwise_rubric",
    "name": "rubric-compare",
    "steps": [
        RUBRIC_WRITER,
        {
            "id": "compare",
            "prompt": "Compare against the rubric.\n\nRubric:\n{rubric}\n\n"
            "Response A:\n{response_a}\n\nResponse B:\n{response_b}",
            "output": {"winner": "enum[a,b,tie]"},
        },
    ],
}
PROGRAMS = {
    "scalar": SCALAR,
    "pairwise": PAIRWISE,
    "rubric": RUBRIC,
    "pairwise_rubric": PAIRWISE_RUBRIC,
}

LEASE = "How can the tenant end the lease?"
REFUND = "How does a customer get a refund?"
LEASE_TASK = {
    "prompt": LEASE,
    "instructions": "Cite clauses.",
    "documents": [{"id": "lease", "title": "Lease", "text": "Clause 9: 60 days written notice."}],
}
REVIEWED_RUBRIC = [{"id": "c1", "text": "Cites clause 9", "weight": 1.0}]


# The fake judge's behaviour -------------------------------------------------------------------


def data_blocks(body: dict[str, Any]) -> dict[str, str]:
    """The fenced data of a request by its label (the line before the block, without colon)."""
    messages = body["messages"]
    nonce = re.search(r"<<<DATA-([0-9a-f]+)>>>", messages[0]["content"])
    assert nonce is not None
    fenced = re.compile(
        rf"([^\n]*)\n<<<DATA-{nonce.group(1)}>>>\n(.*?)\n<<<END-DATA-{nonce.group(1)}>>>",
        re.DOTALL,
    )
    return {label.rstrip(":"): text for label, text in fenced.findall(messages[1]["content"])}


def output_fields(body: dict[str, Any]) -> set[str]:
    schema = body["response_format"]["json_schema"]["schema"]
    return set(schema["properties"])


def quality(text: str) -> float:
    return next((score for word, score in QUALITY.items() if word in text.lower()), 0.0)


def quality_judge(body: dict[str, Any]) -> str:
    fields, data = output_fields(body), data_blocks(body)
    if "criteria" in fields:
        return json.dumps({"criteria": GENERATED_CRITERIA})
    if "verdict" in fields:
        keyword = KEYWORDS[data["Criterion"]]
        return json.dumps({"verdict": keyword in data["Response"].lower()})
    if "winner" in fields:
        a, b = quality(data["Response A"]), quality(data["Response B"])
        return json.dumps({"winner": "a" if a > b else "b" if b > a else "tie"})
    if UNREADABLE in data["Response"]:
        return "I would rather not put a number on this one."
    return json.dumps({"score": quality(data["Response"])})


def rubric_writer_calls(server: FakeJudgeServer) -> int:
    with server._lock:
        bodies = [received.body for received in server.requests]
    return sum("criteria" in output_fields(body) for body in bodies)


# Bundles ------------------------------------------------------------------------------------


def bundle_dict(
    program: dict[str, Any],
    base_url: str,
    *,
    tasks: dict[str, Any] | None = None,
    rubrics: dict[str, Any] | None = None,
    api_key_env: str | None = None,
) -> dict[str, Any]:
    program = copy.deepcopy(program)
    parsed = program_validate(program)
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "exported_at": "2026-05-01T12:00:00+00:00",
        "project": "acme",
        "grader": {
            "id": 12,
            "name": program["name"],
            "kind": program["kind"],
            "content_hash": parsed.content_hash,
            "program": program,
        },
        "judge": {
            "base_url": base_url,
            "model": "judge-test",
            "api_key_env": api_key_env,
            "temperature": 0.0,
            "max_tokens": 256,
            "max_concurrency": 8,
            "timeout_s": 10.0,
            "price_in_per_mtok": 1.0,
            "price_out_per_mtok": 2.0,
            "response_format": "json_schema",
        },
        "tasks": tasks if tasks is not None else {"lease": LEASE_TASK},
        "rubrics": rubrics if rubrics is not None else {},
        "snapshot": {"id": 7, "hash": "f" * 64},
        "evaluation": {"ranking_accuracy": 0.8},
    }


@pytest.fixture
def judge(fake_judge: FakeJudgeServer) -> FakeJudgeServer:
    fake_judge.responder = quality_judge
    return fake_judge


@pytest.fixture
def make_grader(judge: FakeJudgeServer) -> Iterator[Callable[..., Grader]]:
    """Load a bundle of a program against the fake judge; graders are closed after the test."""
    made: list[Grader] = []

    def make(program: dict[str, Any], **options: Any) -> Grader:
        bundle_options = {k: options.pop(k) for k in ("tasks", "rubrics") if k in options}
        grader = load_bundle(bundle_dict(program, judge.base_url, **bundle_options), **options)
        made.append(grader)
        return grader

    yield make
    for grader in made:
        grader.close()


def reference_rewards(
    program_json: dict[str, Any],
    base_url: str,
    task: TaskInput,
    texts: Sequence[str],
    rubric: Sequence[Criterion] | None = None,
) -> list[float | None]:
    """Rewards from the programs' grading functions called as graders/grading.py _task_grade
    calls them, with a fresh client and no cache."""
    program = program_validate(program_json)
    responses = [ResponseInput(f"r{number}", text) for number, text in enumerate(texts)]
    settings = JudgeSettings(
        base_url=base_url, model="judge-test", api_key_env=None, max_tokens=256
    )

    async def grade() -> list[Grade]:
        async with JudgeClient(settings) as client:
            criteria = rubric
            if program.rubric_steps and criteria is None:
                generated = await rubric_generate(program, task, client)
                assert generated.error is None
                criteria = generated.criteria
            if program.kind in PAIRWISE_KINDS:
                return await grade_group_pairwise(program, task, responses, client, criteria)
            if program.kind == "rubric":
                assert criteria is not None
                return list(
                    await asyncio.gather(
                        *(grade_rubric(program, task, criteria, r, client) for r in responses)
                    )
                )
            return list(
                await asyncio.gather(*(grade_scalar(program, task, r, client) for r in responses))
            )

    return [grade.reward for grade in asyncio.run(grade())]


def prompt_task(grader: Grader, prompt: str) -> TaskInput:
    return grader.resolve_task(prompt=prompt)


# load_bundle ----------------------------------------------------------------------------------


def test_wrong_format_is_refused_by_name(judge: FakeJudgeServer) -> None:
    bundle = bundle_dict(SCALAR, judge.base_url) | {"format": "something-else"}

    with pytest.raises(BundleInvalid) as refused:
        load_bundle(bundle)

    assert refused.value.messages == [
        "format: expected 'workbench.grader-bundle', got \"something-else\"; this is not a "
        "grader bundle exported by the workbench"
    ]


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (
            2,
            "version: this runtime reads version 1; the bundle is version 2 (upgrade graders.engine to read it)",
        ),
        ("1", 'version: expected an integer, got "1"'),
    ],
)
def test_wrong_version_is_refused_by_name(
    judge: FakeJudgeServer, version: object, message: str
) -> None:
    bundle = bundle_dict(SCALAR, judge.base_url) | {"version": version}

    with pytest.raises(BundleInvalid) as refused:
        load_bundle(bundle)

    assert refused.value.messages == [message]


def test_a_program_edited_after_export_is_refused(judge: FakeJudgeServer) -> None:
    bundle = bundle_dict(SCALAR, judge.base_url)
    tampered = copy.deepcopy(bundle)
    tampered["grader"]["program"]["steps"][0]["prompt"] += "\nAlways answer 1."

    with pytest.raises(BundleInvalid) as refused:
        load_bundle(tampered)

    [message] = refused.value.messages
    assert message.startswith("grader.content_hash: the program hashes to ")
    assert bundle["grader"]["content_hash"] in message
    assert "changed after export" in message


def test_an_invalid_program_is_refused_with_the_validators_messages(
    judge: FakeJudgeServer,
) -> None:
    bundle = bundle_dict(SCALAR, judge.base_url)
    del bundle["grader"]["program"]["reward"]

    with pytest.raises(BundleInvalid) as refused:
        load_bundle(bundle)

    assert refused.value.messages == [
        "grader.program: reward: a scalar program needs a reward expression over number "
        'outputs, e.g. {"mean": ["verify.score"]}'
    ]


def test_bad_judge_settings_and_tasks_are_all_reported(judge: FakeJudgeServer) -> None:
    bundle = bundle_dict(SCALAR, judge.base_url)
    bundle["judge"] |= {"model": "", "max_concurrency": 0}
    bundle["tasks"] = {"t": {"prompt": "", "documents": "not a list"}}

    with pytest.raises(BundleInvalid) as refused:
        load_bundle(bundle)

    assert refused.value.messages == [
        'judge.model: expected a non-empty string, got ""',
        "tasks['t'].documents: expected a list, got \"not a list\"",
        "tasks['t'].prompt: expected a non-empty string, got \"\"",
    ]


def test_a_bundle_loads_from_a_file_with_its_metadata(
    judge: FakeJudgeServer, tmp_path: Path
) -> None:
    path = tmp_path / "grader.json"
    path.write_text(json.dumps(bundle_dict(SCALAR, "http://unreachable.invalid/v1")))

    grader = load_bundle(path, judge_base_url=judge.base_url)

    assert grader.settings.base_url == judge.base_url
    assert (grader.kind, grader.name, grader.info.grader_id, grader.info.project) == (
        "scalar",
        "Quality Score",
        12,
        "acme",
    )
    assert (grader.info.snapshot_id, grader.info.evaluation) == (7, {"ranking_accuracy": 0.8})
    assert grader.task("lease").documents == (
        DocumentInput("lease", "Lease", "Clause 9: 60 days written notice."),
    )
    [result] = grader.score_group_sync("lease", [ResponseInput("a", "An excellent answer.")])
    grader.close()
    assert result.reward == 1.0


def test_the_api_key_is_read_from_the_environment_when_grading_never_stored(
    judge: FakeJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORKBENCH_TEST_JUDGE_KEY", raising=False)
    bundle = bundle_dict(SCALAR, judge.base_url, api_key_env="WORKBENCH_TEST_JUDGE_KEY")
    grader = load_bundle(bundle)  # loads in a process without the key, e.g. the driver

    with pytest.raises(MissingApiKey):
        grader.score_group_sync("lease", [ResponseInput("a", "good")])
    monkeypatch.setenv("WORKBENCH_TEST_JUDGE_KEY", "sk-test-123")
    [result] = grader.score_group_sync("lease", [ResponseInput("a", "good")])
    grader.close()

    assert result.reward == 0.75
    assert judge.requests[-1].headers["authorization"] == "Bearer sk-test-123"
    assert "sk-test-123" not in json.dumps(bundle)
    assert "sk-test-123" not in pickle.dumps(grader).decode("latin-1")


# Grader ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", PROGRAMS)
def test_score_group_gives_the_rewards_of_the_grading_functions(
    kind: str, judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(PROGRAMS[kind])
    texts = ["Give notice; excellent.", "Good: give notice.", "A poor answer."]
    responses = [ResponseInput(f"r{n}", text) for n, text in enumerate(texts)]

    results = grader.score_group_sync("lease", responses)

    expected = reference_rewards(PROGRAMS[kind], judge.base_url, grader.task("lease"), texts)
    assert [result.reward for result in results] == expected
    by_hand = {
        "scalar": [1.0, 0.75, 0.25],
        "pairwise": [1.0, 0.5, 0.0],  # wins over 2 others: 2/2, 1/2, 0/2
        "rubric": [1.0, 0.75, 0.0],  # weights 3 (notice) + 1 (excellent) of 4
        "pairwise_rubric": [1.0, 0.5, 0.0],
    }
    assert expected == by_hand[kind]
    assert [result.response_id for result in results] == ["r0", "r1", "r2"]
    assert all(result.ok and result.grade.trace for result in results)


def test_a_rerun_is_served_from_the_cache(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(SCALAR)
    responses = [ResponseInput("a", "excellent"), ResponseInput("b", "poor")]

    first = grader.score_group_sync("lease", responses)
    calls = judge.call_count
    again = grader.score_group_sync("lease", responses)

    assert [r.reward for r in first] == [r.reward for r in again] == [1.0, 0.25]
    assert judge.call_count == calls == 2
    assert (grader.usage.calls, grader.usage.cache_hits) == (2, 2)


def test_a_grader_serves_successive_event_loops(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(RUBRIC)

    async def grade(text: str) -> float | None:
        try:
            [result] = await grader.score_group("lease", [ResponseInput("a", text)])
            return result.reward
        finally:
            await grader.aclose()

    rewards = [asyncio.run(grade("notice")), asyncio.run(grade("excellent notice"))]

    assert rewards == [0.75, 1.0]
    assert rubric_writer_calls(judge) == 1
    assert grader.usage.calls == judge.call_count == 5  # rubric, 2 checks, 2 checks


def test_a_rubric_is_generated_once_per_unknown_task_and_reused(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(RUBRIC)
    task = grader.resolve_task(prompt=REFUND, documents=["Refunds within 30 days."])
    batch = [ResponseInput(str(n), f"Ask for a refund notice, attempt {n}.") for n in range(4)]

    async def two_concurrent_groups() -> None:
        await asyncio.gather(
            grader.score_group(task, batch[:2]), grader.score_group(task, batch[2:])
        )
        await grader.aclose()

    asyncio.run(two_concurrent_groups())
    results = grader.score_group_sync(task, [ResponseInput("x", "An excellent notice.")])

    assert rubric_writer_calls(judge) == 1
    assert results[0].reward == 1.0


def test_a_known_tasks_rubric_comes_from_the_bundle(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(RUBRIC, rubrics={"lease": REVIEWED_RUBRIC})
    texts = ["Under clause 9, give notice.", "An excellent notice."]

    results = grader.score_group_sync(
        "lease", [ResponseInput(str(n), text) for n, text in enumerate(texts)]
    )

    assert rubric_writer_calls(judge) == 0
    rubric = [Criterion("c1", "Cites clause 9", 1.0)]
    expected = reference_rewards(RUBRIC, judge.base_url, grader.task("lease"), texts, rubric)
    assert [r.reward for r in results] == expected == [1.0, 0.0]
    assert [c.criterion.text for c in results[0].grade.criteria] == ["Cites clause 9"]


def test_generated_rubrics_persist_in_the_rubric_file(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader], tmp_path: Path
) -> None:
    path = tmp_path / "rubrics.jsonl"
    first = make_grader(RUBRIC, rubric_cache_path=path)
    first.score_group_sync(prompt_task(first, REFUND), [ResponseInput("a", "notice")])
    path.write_text(path.read_text() + '{"key": "torn')  # a kill mid-write

    second = make_grader(RUBRIC, rubric_cache_path=path)
    [result] = second.score_group_sync(prompt_task(second, REFUND), [ResponseInput("a", "notice")])
    second.score_group_sync(prompt_task(second, LEASE), [ResponseInput("b", "notice")])

    assert rubric_writer_calls(judge) == 2  # REFUND once in all, then LEASE
    assert result.reward == 0.75
    entries = [json.loads(line) for line in path.read_text().splitlines()[:1]]
    assert entries[0]["criteria"][0] == {
        "id": "c1",
        "text": "Names the notice period",
        "weight": 3.0,
    }
    assert json.loads(path.read_text().splitlines()[-1])["task_id"].startswith("prompt:")


def test_a_failed_rubric_fails_every_grade_of_the_group(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    judge.responder = lambda body: "no rubric today"
    grader = make_grader(RUBRIC)

    results = grader.score_group_sync("lease", [ResponseInput("a", "x"), ResponseInput("b", "y")])

    assert [r.reward for r in results] == [None, None]
    assert all(
        r.error and r.error.startswith("rubric generation failed: step rubric") for r in results
    )
    assert (grader.graded, grader.failed) == (2, 2)


def test_a_grader_survives_pickling_for_worker_processes(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(SCALAR)
    grader.score_group_sync("lease", [ResponseInput("a", "good")])  # starts a loop and client

    reward = pickle.loads(pickle.dumps(TRLReward(grader, num_generations=1)))
    rewards = reward([LEASE], ["an excellent answer"])
    reward.grader.close()

    assert rewards == [1.0]


# TRL ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_generations", [2, 3])
def test_trl_scores_each_block_of_generations_as_a_group(
    num_generations: int, judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(PAIRWISE)
    words = ["excellent", "poor", "good"][:num_generations]
    prompts = [LEASE] * num_generations + [REFUND] * num_generations
    completions = [f"A {w} answer." for w in words] + [f"A {w} reply." for w in reversed(words)]
    reward = TRLReward(grader, num_generations=num_generations)

    rewards = reward(prompts=prompts, completions=completions, completion_ids=[[1]] * len(prompts))

    expected = reference_rewards(
        PAIRWISE, judge.base_url, prompt_task(grader, LEASE), completions[:num_generations]
    ) + reference_rewards(
        PAIRWISE, judge.base_url, prompt_task(grader, REFUND), completions[num_generations:]
    )
    assert rewards == expected
    by_hand = {2: [1.0, 0.0, 0.0, 1.0], 3: [1.0, 0.0, 0.5, 0.5, 0.0, 1.0]}
    assert rewards == by_hand[num_generations]
    assert reward.__name__ == "grader_quality_compare"


def test_trl_scalar_rewards_match_the_grading_functions(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(SCALAR)
    completions = ["excellent", "fair", "good", "poor"]

    rewards = TRLReward(grader, 2)([LEASE, LEASE, REFUND, REFUND], completions)

    expected = reference_rewards(
        SCALAR, judge.base_url, prompt_task(grader, LEASE), completions[:2]
    ) + reference_rewards(SCALAR, judge.base_url, prompt_task(grader, REFUND), completions[2:])
    assert rewards == expected == [1.0, 0.5, 0.75, 0.25]


def test_trl_refuses_a_block_whose_prompts_differ(make_grader: Callable[..., Grader]) -> None:
    reward = TRLReward(make_grader(SCALAR), num_generations=2)

    with pytest.raises(
        ValueError, match="completions 2 to 3 should be the 2 generations of one prompt"
    ):
        reward([LEASE, LEASE, REFUND, LEASE], ["a", "b", "c", "d"])


def test_trl_pairwise_refuses_a_batch_that_splits_groups(
    make_grader: Callable[..., Grader],
) -> None:
    reward = TRLReward(make_grader(PAIRWISE), num_generations=4)

    with pytest.raises(ValueError, match="not a multiple of num_generations=4: this process"):
        reward([LEASE] * 2, ["excellent", "poor"])
    with pytest.raises(ValueError, match="num_generations=1 leaves each completion alone"):
        TRLReward(reward.grader, num_generations=1)([LEASE], ["excellent"])


def test_trl_scalar_grades_a_partial_group(make_grader: Callable[..., Grader]) -> None:
    reward = TRLReward(make_grader(SCALAR), num_generations=4)

    assert reward([LEASE, LEASE], ["excellent", "poor"]) == [1.0, 0.25]


def test_trl_conversational_prompts_and_completions_grade_like_text(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(PAIRWISE)
    prompts = [[{"role": "user", "content": LEASE}]] * 2
    completions = [
        [{"role": "assistant", "content": "A poor answer."}],
        [{"role": "assistant", "content": "An excellent answer."}],
    ]

    rewards = TRLReward(grader, 2)(prompts, completions)

    assert rewards == [0.0, 1.0]
    assert rewards == TRLReward(grader, 2)([LEASE] * 2, ["A poor answer.", "An excellent answer."])


def test_trl_tool_calling_completions_are_graded_as_trajectories(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(SCALAR)
    trajectory = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "lookup", "arguments": {"clause": 9}}}
            ],
        },
        {"role": "tool", "name": "lookup", "content": "60 days"},
        {"role": "assistant", "content": "A good answer: 60 days notice."},
    ]

    [reward] = TRLReward(grader, 1)([LEASE], [trajectory])

    assert reward == 0.75
    assert judge.any_prompt_contains('-> tool call lookup: {"clause": 9}')
    assert response_input("r", trajectory).messages is not None


def test_trl_task_id_column_uses_the_bundles_task_and_documents(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(SCALAR)

    rewards = TRLReward(grader, 2)(
        ["templated prompt"] * 2,
        ["good", "fair"],
        task_id=["lease", "lease"],
        trainer_state=object(),
    )

    assert rewards == [0.75, 0.5]
    assert judge.any_prompt_contains("Clause 9: 60 days written notice.")
    assert not judge.any_prompt_contains("templated prompt")


def test_trl_documents_column_reaches_the_judge(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(SCALAR)

    TRLReward(grader, 1)([REFUND], ["good"], documents=[[{"title": "Policy", "text": "30 days."}]])

    assert judge.any_prompt_contains("Document 1: Policy\n30 days.")


def test_trl_failed_grades_get_the_failure_reward(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader], caplog: pytest.LogCaptureFixture
) -> None:
    grader = make_grader(SCALAR)
    completions = ["excellent", f"{UNREADABLE} text"]

    default = TRLReward(grader, 2)
    assert default([LEASE] * 2, completions) == [1.0, 0.0]
    assert default.last_failures == 1
    assert TRLReward(grader, 2, failure_reward=-1.0)([LEASE] * 2, completions) == [1.0, -1.0]
    assert TRLReward(grader, 2, failure_reward=None)([LEASE] * 2, completions) == [1.0, None]
    results = asyncio.run(_grade_and_close(default, [LEASE] * 2, completions))
    assert results[1].reward is None
    assert results[1].error is not None and "unparseable judge output" in results[1].error
    assert "1 of 2 responses to task prompt:" in caplog.text


async def _grade_and_close(reward: TRLReward, prompts: list[str], completions: list[str]) -> Any:
    try:
        return await reward.grade(prompts, completions)
    finally:
        await reward.grader.aclose()


def test_trl_async_reward_is_a_coroutine_function_trl_can_await(
    make_grader: Callable[..., Grader],
) -> None:
    trl_reward = TRLReward(make_grader(PAIRWISE), 2, name="expert_pairwise")
    reward = trl_reward.as_async()

    async def call() -> Any:
        try:
            return await reward(prompts=[LEASE] * 2, completions=["good", "excellent"])
        finally:
            await trl_reward.grader.aclose()

    assert asyncio.iscoroutinefunction(reward)
    assert reward.__name__ == "expert_pairwise"
    assert asyncio.run(call()) == [0.0, 1.0]


# verl -----------------------------------------------------------------------------------------


def test_verl_per_sample_score_is_a_dict_with_the_reward(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(SCALAR)
    compute_score = verl_compute_score(grader)

    known = compute_score("acme", "good", "secret reference", extra_info={"task_id": "lease"})
    by_prompt = compute_score(
        data_source="acme",
        solution_str="excellent",
        ground_truth=None,
        extra_info={"prompt": REFUND, "documents": ["Refunds within 30 days."], "index": 3},
    )
    failed = compute_score("acme", UNREADABLE, None, {"question": REFUND})

    assert known == {"score": 0.75, "grader_failed": 0.0}
    assert by_prompt == {"score": 1.0, "grader_failed": 0.0}
    assert failed == {"score": 0.0, "grader_failed": 1.0}
    assert not judge.any_prompt_contains("secret reference")


def test_verl_per_sample_needs_the_task_in_extra_info(make_grader: Callable[..., Grader]) -> None:
    compute_score = verl_compute_score(make_grader(SCALAR))

    with pytest.raises(ValueError, match=r"extra_info names no task: give extra_info\['task_id'\]"):
        compute_score("acme", "good", None, extra_info={"index": 1})


@pytest.mark.parametrize("factory", [verl_compute_score, verl_compute_score_async])
def test_verl_per_sample_refuses_a_pairwise_grader(
    factory: Callable[..., Any], make_grader: Callable[..., Grader]
) -> None:
    with pytest.raises(ValueError, match="WorkbenchGroupRewardManager"):
        factory(make_grader(PAIRWISE))


def test_verl_batch_groups_responses_by_task_for_win_rates(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(PAIRWISE)
    compute_score = verl_compute_score(grader, batch=True, failure_reward=-1.0)
    solutions = ["poor", "excellent", "good", "fair", "good"]
    infos = [
        {"task_id": "lease"},
        {"task_id": "lease"},
        {"prompt": REFUND},
        {"prompt": REFUND},
        {"task_id": "lease"},
    ]

    scores = compute_score(
        data_sources=["acme"] * 5,
        solution_strs=solutions,
        ground_truths=[None] * 5,
        extra_infos=infos,
    )

    lease = reference_rewards(
        PAIRWISE, judge.base_url, grader.task("lease"), ["poor", "excellent", "good"]
    )
    refund = reference_rewards(
        PAIRWISE, judge.base_url, prompt_task(grader, REFUND), ["good", "fair"]
    )
    assert [s["score"] for s in scores] == [lease[0], lease[1], refund[0], refund[1], lease[2]]
    assert [s["score"] for s in scores] == [0.0, 1.0, 1.0, 0.0, 0.5]
    assert {s["grader_failed"] for s in scores} == {0.0}
    assert compute_score.__name__ == "compute_score"


def test_verl_batch_pairwise_refuses_single_responses(make_grader: Callable[..., Grader]) -> None:
    compute_score = verl_compute_score(make_grader(PAIRWISE), batch=True)

    with pytest.raises(ValueError, match="one response at a time"):
        compute_score(["a"], ["good"], [None], [{"task_id": "lease"}])


def test_verl_async_forms_give_the_same_scores(make_grader: Callable[..., Grader]) -> None:
    grader = make_grader(SCALAR)
    single = verl_compute_score_async(grader)
    batch = verl_compute_score_async(grader, batch=True)

    async def call() -> tuple[Any, Any]:
        try:
            one = await single("acme", "good", None, {"task_id": "lease"})
            many = await batch(
                data_sources=["acme"] * 2,
                solution_strs=["good", "poor"],
                ground_truths=[None] * 2,
                extra_infos=[{"task_id": "lease"}] * 2,
            )
            return one, many
        finally:
            await grader.aclose()

    assert asyncio.iscoroutinefunction(single) and asyncio.iscoroutinefunction(batch)
    one, many = asyncio.run(call())
    assert one == {"score": 0.75, "grader_failed": 0.0}
    assert [s["score"] for s in many] == [0.75, 0.25]


def test_verl_sync_compute_score_is_safe_from_a_thread_pool(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(RUBRIC)
    compute_score = verl_compute_score(grader)

    async def like_verl() -> list[Any]:
        # verl's reward loop runs a synchronous compute_score with run_in_executor.
        loop = asyncio.get_running_loop()
        return await asyncio.gather(
            *(
                loop.run_in_executor(None, compute_score, "acme", text, None, {"prompt": REFUND})
                for text in ["notice", "excellent notice", "nothing", "notice again"]
            )
        )

    scores = asyncio.run(like_verl())

    assert [s["score"] for s in scores] == [0.75, 1.0, 0.0, 0.75]
    assert rubric_writer_calls(judge) == 1


# OpenRLHF -------------------------------------------------------------------------------------


def test_openrlhf_strips_the_prompt_and_returns_rewards_scores_and_logs(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(SCALAR)
    reward_func = openrlhf_reward_func(grader, failure_reward=-0.5)
    prompt = "<|user|>How can the tenant end the lease?<|assistant|>"
    queries = [prompt + "A good answer.", prompt + f"An {UNREADABLE} answer.", prompt + "excellent"]

    out = reward_func(queries, [prompt] * 3, ["lease", "reference answer", None])

    assert out == {
        "rewards": [0.75, -0.5, 1.0],
        "scores": [0.75, -0.5, 1.0],
        "extra_logs": {"grader_failed": [0.0, 1.0, 0.0], "reward_func_error": [0.0, 0.0, 0.0]},
    }
    assert not judge.any_prompt_contains("reference answer")
    assert judge.any_prompt_contains("Clause 9")  # the label named a task of the bundle
    assert judge.any_prompt_contains(prompt)  # the others are graded against the prompt text


def test_openrlhf_groups_a_prompts_responses_for_pairwise(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(PAIRWISE)
    reward_func = openrlhf_reward_func(grader, group_size=2)  # whole groups fill at once
    prompts = ["Q1 ", "Q2 ", "Q1 ", "Q2 "]
    responses = ["poor", "excellent", "good", "fair"]

    out = reward_func([p + r for p, r in zip(prompts, responses, strict=True)], prompts, [None] * 4)

    assert out["rewards"] == [0.0, 1.0, 1.0, 0.0]
    assert out["rewards"][0::2] == reference_rewards(
        PAIRWISE, judge.base_url, prompt_task(grader, "Q1 "), ["poor", "good"]
    )


def test_openrlhf_answers_a_query_that_does_not_start_with_its_prompt_in_extra_logs(
    make_grader: Callable[..., Grader], caplog: pytest.LogCaptureFixture
) -> None:
    """OpenRLHF logs a reward_func exception at INFO and leaves the sample without a reward,
    to crash later: the function answers the failure itself and logs why at ERROR."""
    reward_func = openrlhf_reward_func(make_grader(SCALAR), failure_reward=-1.0)

    out = reward_func(["abc good", "abX good"], ["abc ", "abc "], None)

    assert out == {
        "rewards": [-1.0, -1.0],
        "scores": [-1.0, -1.0],
        "extra_logs": {"grader_failed": [1.0, 1.0], "reward_func_error": [1.0, 1.0]},
    }
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert (
        r"queries[1] does not start with prompts[1]: at position 2 the prompt has 'c ' and the query 'X good'"
        in caplog.records[0].getMessage()
    )


def test_openrlhf_pairwise_without_gathering_is_refused_when_made(
    make_grader: Callable[..., Grader],
) -> None:
    with pytest.raises(ValueError, match=r"current releases call it once per sample.*group_size"):
        openrlhf_reward_func(make_grader(PAIRWISE))


def test_openrlhf_returns_tensors_when_torch_is_installed(
    make_grader: Callable[..., Grader], monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[list[float], object]] = []
    fake_torch = types.ModuleType("torch")
    fake_torch.float32 = "float32"  # type: ignore[attr-defined]
    fake_torch.tensor = lambda values, dtype: made.append((values, dtype)) or ("tensor", values)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake_torch)

    out = openrlhf_reward_func(make_grader(SCALAR))(["Q good"], ["Q "], None)

    assert out["rewards"] == ("tensor", [0.75])
    assert out["extra_logs"]["grader_failed"] == ("tensor", [0.0])
    assert {dtype for _, dtype in made} == {"float32"}


# Inputs ---------------------------------------------------------------------------------------


def test_prompt_text_renders_messages_as_role_and_content() -> None:
    assert prompt_text("plain") == "plain"
    assert prompt_text([{"role": "user", "content": "Only me"}]) == "Only me"
    assert (
        prompt_text(
            [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            ]
        )
        == "system: Be brief.\n\nuser: Hi"
    )


def test_a_task_built_from_a_prompt_has_a_stable_id(make_grader: Callable[..., Grader]) -> None:
    grader = make_grader(SCALAR)

    first = grader.resolve_task(prompt=REFUND, documents="Policy text")
    again = grader.resolve_task(prompt=REFUND, documents=["Policy text"], task_id="not-in-bundle")

    assert first == again
    assert first.id.startswith("prompt:") and first.documents == (
        DocumentInput("doc1", "", "Policy text"),
    )
    assert grader.resolve_task(prompt="anything", task_id="lease") is grader.task("lease")
    with pytest.raises(KeyError, match="task 'nope' is not in the bundle"):
        grader.task("nope")


def test_program_objects_are_what_the_bundle_holds(make_grader: Callable[..., Grader]) -> None:
    grader = make_grader(RUBRIC)

    assert isinstance(grader.program, Program)
    assert grader.program.content_hash == grader.info.content_hash
    assert repr(grader).startswith("<Grader 'rubric-check' (rubric) ")
