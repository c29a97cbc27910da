"""Following a workbench alias (graders/engine/follow.py) without Django: the workbench's
bundle endpoint is an httpx.MockTransport that speaks its protocol (the bundle, a strong ETag,
304 to a matching If-None-Match), and the judge is the fake judge over real HTTP. The same
follower against the real workbench is tests/graders/test_aliases_follow.py."""

import copy
import logging
import pickle
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from graders.engine.egress import EgressPolicy, EgressRefused
from graders.engine.runtime import (
    FollowedGrader,
    FollowFailed,
    FollowRefused,
    follow_alias,
    openrlhf_reward_func,
    verl_compute_score,
)
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.engine.test_runtime import PAIRWISE, SCALAR, bundle_dict, quality_judge

URL = "https://workbench.example/api/p/acme/graders/alias/production/bundle"
TOKEN = "wbt_0123abcd_" + "s" * 43
SCALAR_B = copy.deepcopy(SCALAR) | {"name": "Quality Score B"}
SCALAR_B["steps"][0]["prompt"] = "Version B. " + SCALAR["steps"][0]["prompt"]


class Workbench:
    """The alias's bundle endpoint: serves `bundle`, answers 304 while the client has it,
    or the scripted `status` with a detail; records what it was sent."""

    def __init__(self, bundle: dict[str, Any]) -> None:
        self.bundle = bundle
        self.status = 200
        self.etag_override: str | None = None
        self.requests: list[httpx.Request] = []
        self.transport = httpx.MockTransport(self.handle)

    @property
    def etag(self) -> str:
        return f'"{self.bundle["grader"]["content_hash"]}"'

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.status != 200:
            return httpx.Response(self.status, json={"detail": "This token was revoked."})
        if request.headers.get("If-None-Match") == self.etag:
            return httpx.Response(304, headers={"ETag": self.etag})
        return httpx.Response(
            200, json=self.bundle, headers={"ETag": self.etag_override or self.etag}
        )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def judge(fake_judge: FakeJudgeServer) -> FakeJudgeServer:
    fake_judge.responder = quality_judge
    return fake_judge


@pytest.fixture
def bundles(judge: FakeJudgeServer) -> dict[str, dict[str, Any]]:
    return {
        "a": bundle_dict(SCALAR, judge.base_url),
        "b": bundle_dict(SCALAR_B, judge.base_url),
        "pairwise": bundle_dict(PAIRWISE, judge.base_url),
    }


@pytest.fixture
def followers() -> Iterator[list[FollowedGrader]]:
    made: list[FollowedGrader] = []
    yield made
    for follower in made:
        follower.close()


def follow(workbench: Workbench, followers: list[FollowedGrader], **options: Any) -> FollowedGrader:
    follower = follow_alias(URL, TOKEN, workbench_transport=workbench.transport, **options)
    followers.append(follower)
    return follower


def hash_of(bundle: dict[str, Any]) -> str:
    return str(bundle["grader"]["content_hash"])


def test_a_recheck_is_one_conditional_request_and_a_move_switches_and_is_logged(
    bundles: dict[str, dict[str, Any]], followers: list[FollowedGrader], caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="graders.engine.follow")
    workbench, clock = Workbench(bundles["a"]), Clock()
    follower = follow(workbench, followers, recheck_seconds=60, clock=clock)
    first = follower.grader
    assert follower.content_hash == hash_of(bundles["a"])
    (loaded,) = workbench.requests
    assert loaded.headers["Authorization"] == f"Bearer {TOKEN}"
    assert "If-None-Match" not in loaded.headers
    clock.now += 59
    assert follower.current() is first and len(workbench.requests) == 1  # not due yet
    clock.now += 1
    assert follower.current() is first  # due: asked, and told 304
    assert workbench.requests[-1].headers["If-None-Match"] == f'"{hash_of(bundles["a"])}"'
    assert len(workbench.requests) == 2
    workbench.bundle = bundles["b"]  # the alias moves
    clock.now += 30
    assert follower.current() is first  # the interval starts again at each re-check
    clock.now += 30
    assert follower.current().info.content_hash == hash_of(bundles["b"])
    assert len(workbench.requests) == 3
    moved = [r.getMessage() for r in caplog.records if "moved" in r.getMessage()]
    assert moved == [
        f"grader alias {URL} moved: {hash_of(bundles['a'])} -> {hash_of(bundles['b'])} "
        "(Quality Score B); the next groups are graded by the new version"
    ]


def test_a_pinned_runtime_refuses_another_version_and_never_rechecks(
    bundles: dict[str, dict[str, Any]], followers: list[FollowedGrader]
) -> None:
    workbench, clock = Workbench(bundles["b"]), Clock()
    pinned = hash_of(bundles["a"])
    with pytest.raises(FollowRefused) as refused:
        follow(workbench, followers, pinned_hash=pinned, clock=clock)
    assert f"serves version {hash_of(bundles['b'])}" in str(refused.value)
    assert f"pinned to {pinned}" in str(refused.value)
    workbench.bundle = bundles["a"]
    follower = follow(workbench, followers, pinned_hash=pinned, recheck_seconds=0, clock=clock)
    asked = len(workbench.requests)
    workbench.bundle = bundles["b"]
    clock.now += 3600
    assert follower.current().info.content_hash == pinned
    assert len(workbench.requests) == asked


def test_a_failed_recheck_keeps_the_version_and_says_so(
    bundles: dict[str, dict[str, Any]], followers: list[FollowedGrader], caplog: Any
) -> None:
    workbench, clock = Workbench(bundles["a"]), Clock()
    follower = follow(workbench, followers, recheck_seconds=10, clock=clock)
    workbench.status = 401
    workbench.bundle = bundles["b"]
    clock.now += 10
    assert follower.current().info.content_hash == hash_of(bundles["a"])
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "answered 401: This token was revoked." in warning.getMessage()
    assert f"still grading with {hash_of(bundles['a'])}" in warning.getMessage()
    # The first load has nothing to fall back on, so it raises, with the workbench's words.
    with pytest.raises(FollowFailed, match=r"answered 401: This token was revoked\."):
        follow(workbench, followers)


def test_a_version_of_another_kind_is_refused_and_the_old_one_kept(
    bundles: dict[str, dict[str, Any]], followers: list[FollowedGrader], caplog: Any
) -> None:
    workbench = Workbench(bundles["a"])
    follower = follow(workbench, followers, recheck_seconds=0)
    workbench.bundle = bundles["pairwise"]
    assert follower.current().kind == "scalar"
    assert "now serves a pairwise grader" in caplog.text
    assert "this runtime was set up for scalar" in caplog.text


def test_an_etag_that_disagrees_with_the_bundle_is_refused(
    bundles: dict[str, dict[str, Any]], followers: list[FollowedGrader]
) -> None:
    workbench = Workbench(bundles["a"])
    workbench.etag_override = '"' + "0" * 64 + '"'
    with pytest.raises(FollowFailed, match="the ETag names 0000"):
        follow(workbench, followers)


def test_the_egress_policy_refuses_a_url_before_anything_is_sent(
    bundles: dict[str, dict[str, Any]],
) -> None:
    workbench = Workbench(bundles["a"])
    policy = EgressPolicy.parse()
    with pytest.raises(EgressRefused, match=r"127\.0\.0\.1:8000 is a loopback address"):
        FollowedGrader("http://127.0.0.1:8000/api/p/acme/graders/alias/x/bundle", TOKEN,
                       egress=policy)  # fmt: skip
    with pytest.raises(ValueError, match="does not enforce the egress policy"):
        FollowedGrader(URL, TOKEN, egress=policy, workbench_transport=workbench.transport)
    assert workbench.requests == []


def test_verl_and_openrlhf_functions_grade_each_call_with_the_version_current_then(
    judge: FakeJudgeServer,
    bundles: dict[str, dict[str, Any]],
    followers: list[FollowedGrader],
) -> None:
    workbench = Workbench(bundles["a"])
    follower = follow(workbench, followers, recheck_seconds=0)
    compute_score = verl_compute_score(follower)
    reward_func = openrlhf_reward_func(follower)
    info = {"task_id": "lease"}
    assert compute_score("d", "A good answer.", None, extra_info=info)["score"] == 0.75
    assert reward_func(["Q: A fair answer."], ["Q:"])["rewards"] == [0.5]
    assert not judge.any_prompt_contains("Version B.")
    workbench.bundle = bundles["b"]
    seen = judge.call_count
    assert compute_score("d", "An excellent answer.", None, extra_info=info)["score"] == 1.0
    assert reward_func(["Q: A poor answer."], ["Q:"])["rewards"] == [0.25]
    later = [r.body["messages"][-1]["content"] for r in judge.requests[seen:]]
    assert len(later) == 2 and all(text.startswith("Version B.") for text in later)


def test_a_followed_grader_survives_pickling_for_worker_processes(
    bundles: dict[str, dict[str, Any]], followers: list[FollowedGrader]
) -> None:
    workbench = Workbench(bundles["a"])
    follower = follow(workbench, followers, recheck_seconds=3600)
    copied = pickle.loads(pickle.dumps(follower))
    followers.append(copied)
    assert copied.content_hash == follower.content_hash
    assert copied.current() is copied.grader  # not due: no request, no transport needed
    assert len(workbench.requests) == 1
