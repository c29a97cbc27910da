"""The local demo judge for real: llama.cpp's server in its own process, called over HTTP the way
the judge client calls a provider, answering with JSON held to a schema by constrained decoding."""

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from graders.engine.jsonout import extract_json_object, validate
from graders.engine.synthesis.prompts import STEER_SCHEMA, steer_request
from graders.engine.synthesis.types import DimensionSpec, SynthesisTask
from graders.local_judge import (
    LOCAL_JUDGE_CONTEXT_TOKENS,
    LOCAL_JUDGE_MODEL,
    LocalJudgeUnavailable,
    local_judge_model_path,
    local_judge_start,
    local_judge_wait_ready,
)
from labeling.demo import DEMO_FILE

ALLOWED_SCORES = [0, 0.25, 0.5, 0.75, 1]
# llama.cpp does not enforce minimum/maximum on numbers, so the allowed range is an enum.
SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number", "enum": ALLOWED_SCORES}},
    "required": ["score"],
}
# The two shapes graders/engine/judge.py can send; llama.cpp honours a schema in both.
RESPONSE_FORMATS = {
    "json_schema": {
        "type": "json_schema",
        "json_schema": {"name": "grade", "schema": SCORE_SCHEMA, "strict": True},
    },
    "json_object": {"type": "json_object", "schema": SCORE_SCHEMA},
}
# Not the usual 0-10 answer, so that an unconstrained model would step outside the enum.
INSTRUCTIONS = (
    "You grade answers to quiz questions. Compare the candidate answer with the reference and "
    "give it a score out of 10, where 10 means fully correct."
)
CANDIDATES = [
    "Canberra is the capital of Australia.",
    "Sydney, the largest city, is the capital of Australia.",
    "Australia is a country and a continent; its capital is a city.",
]


@pytest.fixture(scope="module")
def local_judge() -> Iterator[str]:
    try:
        local_judge_model_path()
    except LocalJudgeUnavailable as error:
        if os.environ.get("WORKBENCH_REQUIRE_SERVICES") == "1":
            pytest.fail(str(error))
        pytest.skip(str(error))
    port = _free_loopback_port()
    process = local_judge_start(port)
    try:
        base_url = f"http://127.0.0.1:{port}"
        local_judge_wait_ready(base_url, timeout=30, process=process)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_model_is_listed_under_its_alias(local_judge: str) -> None:
    models = httpx.get(f"{local_judge}/v1/models", timeout=10).json()

    assert [model["id"] for model in models["data"]] == [LOCAL_JUDGE_MODEL]


@pytest.mark.parametrize("response_format", RESPONSE_FORMATS.values(), ids=RESPONSE_FORMATS)
def test_scores_are_json_within_the_schema_enum(
    local_judge: str, response_format: dict[str, object]
) -> None:
    with httpx.Client(base_url=local_judge, timeout=30) as client:
        for candidate in CANDIDATES:
            response = client.post(
                "/v1/chat/completions",
                json={
                    "model": LOCAL_JUDGE_MODEL,
                    "messages": [
                        {"role": "system", "content": INSTRUCTIONS},
                        {
                            "role": "user",
                            "content": "Question: What is the capital of Australia?\n"
                            f"Reference: Canberra.\nCandidate: {candidate}",
                        },
                    ],
                    "response_format": response_format,
                    "temperature": 0,
                    "seed": 0,
                    "max_tokens": 24,
                },
            )
            response.raise_for_status()
            answer = json.loads(response.json()["choices"][0]["message"]["content"])

            assert answer["score"] in ALLOWED_SCORES, answer


def test_a_request_may_hold_a_demo_trajectory_pair(local_judge: str) -> None:
    # The demo's pairwise calls on airline trajectories run to about 2,500 tokens; with a
    # 2048-token context llama.cpp refused every one with HTTP 400. The context it reports is
    # one slot's, the most a single request may hold.
    props = httpx.get(f"{local_judge}/props", timeout=10).json()

    assert props["default_generation_settings"]["n_ctx"] == LOCAL_JUDGE_CONTEXT_TOKENS >= 4096


@pytest.mark.parametrize("seed", [3, 4])
def test_the_steering_writer_answer_closes_every_field(local_judge: str, seed: int) -> None:
    # Without the server's anti-repetition samplers (DRY, repeat penalty) the model repeated one
    # clause inside "reasoning" until max_tokens (768 tokens, no closing brace), as it did for
    # the demo synthesis's steering calls: measured on seed 4 here, on 3 and 4 in a server that
    # had answered other requests first. With them both stop.
    # Whether its three instructions are usable (non-empty, distinct) is steer_parse's call in
    # a real run.
    recs = [json.loads(line) for line in DEMO_FILE.read_text(encoding="utf-8").splitlines()]
    dim = next(r for r in recs if r["type"] == "dimension" and r["name"] == "helpfulness")
    task = next(r for r in recs if r["type"] == "task" and r["id"] == "air-01")
    request = steer_request(
        dimension=DimensionSpec(dim["name"], dim["description"]),
        task=SynthesisTask(task["id"], task["domain"], task["prompt"], task["instructions"]),
    )
    payload = {
        "model": LOCAL_JUDGE_MODEL,
        "messages": list(request.messages),
        "temperature": 0.3,
        "seed": seed,
        "max_tokens": 768,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "steer", "schema": STEER_SCHEMA, "strict": True},
        },
    }
    response = httpx.post(f"{local_judge}/v1/chat/completions", json=payload, timeout=300)
    choice = response.json()["choices"][0]

    assert choice["finish_reason"] == "stop"
    answer = extract_json_object(choice["message"]["content"])
    assert answer is not None
    assert validate(answer, STEER_SCHEMA).keys() == {"reasoning", "bad", "ok", "good"}


@pytest.mark.django_db
def test_a_grading_run_through_the_local_judge(
    local_judge: str, tmp_path: object, settings: Any
) -> None:
    """The product path end to end: baseline scalar program, engine client, real server,
    allowed exactly as `make run` allows its local judge."""
    settings.JUDGE_PRIVATE_HOSTS = [local_judge.removeprefix("http://")]
    from graders.engine.baseline import baseline_program
    from graders.grading import grading_run_execute
    from graders.models import Grade, JudgeCall
    from graders.services import grading_run_start, local_demo_endpoint_ensure, metagrader_register
    from labeling.models import Project, Response, Task

    project = Project.objects.create(slug="local", name="Local")
    task = Task.objects.create(
        project=project, external_id="q", prompt="What is the capital of Australia?", split="eval"
    )
    for n, text in enumerate(CANDIDATES):
        Response.objects.create(project=project, task=task, external_id=f"q/r{n}", content=text)
    endpoint = local_demo_endpoint_ensure(project=project, base_url=f"{local_judge}/v1")
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    run = grading_run_start(project=project, metagrader=grader, endpoint=endpoint, split="eval")
    assert grading_run_execute(run_id=run.pk)["status"] == "succeeded"
    grades = list(Grade.objects.filter(run=run))
    assert len(grades) == 3 and JudgeCall.objects.count() == 3
    for grade in grades:
        # A small model may answer out of range; that is a recorded failure, never a score.
        assert (grade.reward is not None and 0 <= grade.reward <= 1) or grade.error
        assert grade.trace[0]["text"]
