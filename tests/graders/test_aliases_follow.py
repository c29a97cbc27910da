"""A training job's runtime following an alias of the real workbench over real HTTP (the
live server): it switches versions when the alias is promoted, at a group boundary and never
inside a group, logs the switch, and records a download only when a bundle was sent."""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.urls import reverse

from graders.aliases import alias_promote
from graders.engine.baseline import baseline_program
from graders.engine.egress import EgressPolicy, EgressRefused
from graders.engine.runtime import FollowedGrader, TRLReward, follow_alias
from graders.models import GraderExport, JudgeEndpoint
from graders.services import metagrader_register
from graders.tokens import token_create
from labeling.imports import jsonl_import
from labeling.models import Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_reward_api import quality_responder
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db(transaction=True)

MARK_B = "Version B."
WAIT_S = 20.0


@pytest.fixture
def followed(
    project: Project, tmp_path: Path, fake_judge: FakeJudgeServer, live_server: Any
) -> Iterator[dict[str, Any]]:
    """Two scalar versions (B's prompt starts with MARK_B), `production` on A, an export
    token, and the alias's bundle URL on the live server."""
    cache.clear()
    fake_judge.responder = quality_responder
    records = [{"type": "task", "id": "t0", "prompt": "Review contract 0"}]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "t.jsonl", records))
    JudgeEndpoint.objects.create(
        project=project, name="fake", base_url=fake_judge.base_url, model="fake-judge",
        max_concurrency=8, is_default=True,
    )  # fmt: skip
    program_a = baseline_program("scalar").to_json()
    program_b = program_a | {"steps": [dict(program_a["steps"][0])]}
    program_b["steps"][0]["prompt"] = f"{MARK_B} {program_a['steps'][0]['prompt']}"
    a, b = (
        metagrader_register(project=project, program=program, origin="human")
        for program in (program_a, program_b)
    )
    alias_promote(project=project, name="production", metagrader=a)
    path = reverse("api-bundle-alias", args=["acme", "production"])
    made: list[FollowedGrader] = []
    yield {
        "project": project, "a": a, "b": b, "url": live_server.url + path,
        "token": token_create(project=project, name="trainer", scopes=["export"])[1],
        "made": made, "host_port": live_server.url.removeprefix("http://"),
    }  # fmt: skip
    for follower in made:
        follower.close()


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


def judged_texts(server: FakeJudgeServer, word: str) -> list[str]:
    """The prompt of every judge request about a response containing `word`."""
    with server._lock:
        bodies = [received.body for received in server.requests]
    texts = ["\n".join(str(m["content"]) for m in body["messages"]) for body in bodies]
    return [text for text in texts if word in text]


def test_a_followed_alias_switches_versions_between_groups_never_inside_one(
    followed: dict[str, Any], fake_judge: FakeJudgeServer, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="graders.engine.follow")
    a, b = followed["a"], followed["b"]
    follower = follow_alias(followed["url"], followed["token"], recheck_seconds=0)
    followed["made"].append(follower)
    assert follower.content_hash == a.content_hash
    reward = TRLReward(follower, num_generations=3)
    prompts, task_ids = ["Review contract 0"] * 3, ["t0"] * 3
    results: dict[str, Any] = {}

    def grade(word: str) -> None:
        completions = [f"{quality} answer {word}" for quality in ("GOOD", "OKAY", "POOR")]
        results[word] = reward(prompts, completions, task_id=task_ids)

    fake_judge.hold()
    first = threading.Thread(target=grade, args=["alpha"])
    first.start()
    wait_for(lambda: fake_judge.held == 3)  # the first group is being graded, by A
    alias_promote(project=followed["project"], name="production", metagrader=b)
    second = threading.Thread(target=grade, args=["beta"])
    second.start()
    wait_for(lambda: fake_judge.held == 6)  # the second group started after the move
    fake_judge.release()
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert results == {"alpha": [0.9, 0.5, 0.1], "beta": [0.9, 0.5, 0.1]}
    # The group in flight when the alias moved kept A to its end; the next one was all B.
    alpha, beta = judged_texts(fake_judge, "answer alpha"), judged_texts(fake_judge, "answer beta")
    assert len(alpha) == 3 and not any(MARK_B in text for text in alpha)
    assert len(beta) == 3 and all(MARK_B in text for text in beta)
    assert follower.content_hash == b.content_hash
    assert f"moved: {a.content_hash} -> {b.content_hash}" in caplog.text
    # Another call re-checks (304) and stays on B; only the two downloads were exports.
    grade("gamma")
    assert all(MARK_B in text for text in judged_texts(fake_judge, "answer gamma"))
    exports = GraderExport.objects.order_by("pk").values_list("metagrader", "token__name")
    assert list(exports) == [(a.pk, "trainer"), (b.pk, "trainer")]


def test_the_egress_policy_applies_to_the_workbench_connection(followed: dict[str, Any]) -> None:
    allowed = EgressPolicy.parse(private_hosts=[followed["host_port"]])
    follower = follow_alias(followed["url"], followed["token"], egress=allowed)
    followed["made"].append(follower)
    assert follower.content_hash == followed["a"].content_hash
    # The live server's host is a name: it passes the URL check, and its address is refused
    # when the connection is made.
    assert followed["url"].startswith("http://localhost:")
    with pytest.raises(EgressRefused, match="resolves to a loopback address"):
        follow_alias(followed["url"], followed["token"], egress=EgressPolicy.parse())
