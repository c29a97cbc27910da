"""get_reward with ?group_size=N (graders/reward_gather.py): OpenRLHF's one-sample requests
gathered into groups over real HTTP, in one server process (the live server's threads) and
across two gunicorn processes that share Redis and the database; rewards equal in-app grading
of the same responses, each group graded once."""
# ruff: noqa: F811 (the fixtures of test_reward_api.py, imported, are arguments here)

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.urls import reverse

from graders import reward_gather
from graders.models import ApiToken, CapturedGroup, JudgeEndpoint, Metagrader
from graders.tokens import token_create
from labeling.models import Project
from tests.conftest import _reachable, service_required, wait_for
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_reward_api import (  # noqa: F401 (fixtures)
    grader_of,
    group,
    in_app_rewards,
    judge,
    rate_counts_cleared,
    reward_project,
    token,
)

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
REDIS_URL = os.environ.get("REWARD_GATHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")


def get_reward_url(base: str, grader: Metagrader, **params: Any) -> str:
    path = reverse("api-get-reward", args=["acme", grader.pk])
    return f"{base}{path}?{urlencode(params, doseq=True)}"


def one_sample(task: str, content: str, eos: str = "<|im_end|>") -> dict[str, Any]:
    """One OpenRLHF request: the decoded query keeps the EOS text (skip_special_tokens=False)."""
    prompt = TEMPLATE.format(task)
    return {"query": [prompt + content + eos], "prompts": [prompt], "labels": [task]}


def post_all(urls: Sequence[str], bodies: Sequence[Any], raw: str) -> list[httpx.Response]:
    """Every request at once, from its own thread, as OpenRLHF's executor sends them."""
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(
            pool.map(
                lambda url, body: httpx.post(
                    url, json=body, headers={"Authorization": f"Bearer {raw}"}, timeout=60
                ),
                urls,
                bodies,
            )
        )


@pytest.fixture
def scoring_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every group the gathering grades (the real openrlhf_score, counted)."""
    sizes: list[int] = []
    real = reward_gather.openrlhf_score

    def counted(**kwargs: Any) -> Any:
        sizes.append(len(kwargs["data"]["query"]))
        return real(**kwargs)

    monkeypatch.setattr(reward_gather, "openrlhf_score", counted)
    return sizes


def test_samples_sent_one_per_request_are_graded_as_one_group_each_like_in_app(
    live_server: Any, reward_project: Project, judge: JudgeEndpoint, token: str,
    scoring_calls: list[int],
) -> None:  # fmt: skip
    grader = grader_of(reward_project, "pairwise")
    expected = in_app_rewards(reward_project, judge, grader)
    rows = [(task, r) for task in ("t0", "t2") for r in group(task)]
    rows = rows[::2] + rows[1::2]  # the two prompts' samples interleave
    url = get_reward_url(live_server.url, grader, group_size=3, wait_s=20)

    answers = post_all([url] * len(rows), [one_sample(t, r["content"]) for t, r in rows], token)

    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert [a.json()["rewards"] for a in answers] == [[expected[r["id"]]] for _, r in rows]
    assert {a.json()["extra_logs"]["group_incomplete"][0] for a in answers} == {0.0}
    assert {a.json()["extra_logs"]["grader_failed"][0] for a in answers} == {0.0}
    assert sorted(scoring_calls) == [3, 3]  # graded once per group, not once per sample


def test_without_group_size_a_pairwise_sample_alone_fails_as_before(
    live_server: Any, reward_project: Project, judge: JudgeEndpoint, token: str
) -> None:
    grader = grader_of(reward_project, "pairwise")
    url = get_reward_url(live_server.url, grader)
    [answer] = post_all([url], [one_sample("t0", "GOOD answer 0")], token)
    assert answer.json()["extra_logs"] == {"grader_failed": [1.0]}


def test_a_group_that_does_not_fill_in_time_is_graded_as_it_stands(
    live_server: Any, reward_project: Project, judge: JudgeEndpoint, token: str,
    scoring_calls: list[int],
) -> None:  # fmt: skip
    grader = grader_of(reward_project, "pairwise")
    contents = ["GOOD answer 1", "POOR answer 1"]
    batch = get_reward_url(live_server.url, grader)
    [whole] = post_all([batch], [{"query": [TEMPLATE.format("t1") + c for c in contents],
                                 "prompts": [TEMPLATE.format("t1")] * 2, "labels": ["t1"] * 2}],
                       token)  # fmt: skip
    scoring_calls.clear()
    url = get_reward_url(live_server.url, grader, group_size=3, wait_s=1)
    started = time.monotonic()

    answers = post_all([url] * 2, [one_sample("t1", c) for c in contents], token)

    assert time.monotonic() - started >= 1
    assert [a.json()["rewards"][0] for a in answers] == whole.json()["rewards"] == [1.0, 0.0]
    assert [a.json()["extra_logs"]["group_incomplete"] for a in answers] == [[1.0], [1.0]]
    assert scoring_calls == [2]


def test_a_group_that_does_not_fill_in_time_is_refused_when_asked_without_a_judge_call(
    live_server: Any, reward_project: Project, judge: JudgeEndpoint, token: str,
    fake_judge: FakeJudgeServer,
) -> None:  # fmt: skip
    grader = grader_of(reward_project, "pairwise")
    url = get_reward_url(live_server.url, grader, group_size=3, wait_s=0.5, partial="refuse")
    calls = fake_judge.call_count

    answers = post_all([url] * 2, [one_sample("t1", "GOOD answer 1")] * 2, token)

    assert [a.status_code for a in answers] == [409, 409]
    assert "held 2 of 3 samples" in answers[0].json()["detail"]
    assert fake_judge.call_count == calls


def test_special_token_text_is_stripped_unless_told_otherwise(
    live_server: Any, reward_project: Project, judge: JudgeEndpoint, token: str,
    fake_judge: FakeJudgeServer,
) -> None:  # fmt: skip
    grader = grader_of(reward_project, "scalar")
    for eos in ("<|im_end|>", "</s>", "<|endoftext|>", "<|eot_id|>"):
        [answer] = post_all([get_reward_url(live_server.url, grader)],
                            [one_sample("t0", f"A fresh GOOD answer {eos!r}", eos)], token)  # fmt: skip
        assert answer.json()["rewards"] == [0.9]
    assert not any(fake_judge.any_prompt_contains(e) for e in ("<|im_end|>", "</s>", "<|eot_id|>"))
    kept = get_reward_url(live_server.url, grader, special_tokens="none")
    post_all([kept], [one_sample("t0", "Kept GOOD answer")], token)
    assert fake_judge.any_prompt_contains("Kept GOOD answer<|im_end|>")
    chosen = get_reward_url(live_server.url, grader, special_tokens=["<END>"])
    post_all([chosen], [one_sample("t0", "Chosen GOOD answer<END>")], token)
    assert fake_judge.any_prompt_contains("Chosen GOOD answer<|im_end|>")
    assert not fake_judge.any_prompt_contains("<END>")


def test_gathering_takes_one_query_per_request_and_checks_its_parameters(
    live_server: Any, reward_project: Project, judge: JudgeEndpoint, token: str
) -> None:
    grader = grader_of(reward_project, "pairwise")
    two = one_sample("t0", "GOOD answer 0")
    two = {key: value * 2 for key, value in two.items()}
    bad = [get_reward_url(live_server.url, grader, group_size=3),
           get_reward_url(live_server.url, grader, group_size=0),
           get_reward_url(live_server.url, grader, group_size=3, wait_s=500),
           get_reward_url(live_server.url, grader, group_size=3, partial="maybe")]  # fmt: skip
    answers = post_all(bad, [two] + [one_sample("t0", "GOOD answer 0")] * 3, token)
    assert [a.status_code for a in answers] == [400] * 4
    assert [next(iter(a.json())) for a in answers] == ["query", "group_size", "wait_s", "partial"]


def test_the_request_that_grades_a_group_captures_it_whole_as_the_judge_read_it(
    live_server: Any, reward_project: Project, judge: JudgeEndpoint, settings: Any
) -> None:
    settings.CAPTURE_QUEUE_SIZE = 0  # stored before the answer's close() returns
    grader = grader_of(reward_project, "pairwise")
    raw = token_create(project=reward_project, name="capturing", scopes=["reward"])[1]
    ApiToken.objects.filter(name="capturing").update(capture_rate=1.0)
    contents = [r["content"] for r in group("t0")]
    url = get_reward_url(live_server.url, grader, group_size=3, wait_s=20)
    bodies = [{**one_sample("t0", c), "run": "grpo-3", "step": 4} for c in contents]

    answers = post_all([url] * 3, bodies, raw)

    assert [a.status_code for a in answers] == [200] * 3
    assert wait_for(lambda: CapturedGroup.objects.count() == 1, timeout=10)
    captured = CapturedGroup.objects.get()
    assert (captured.run, captured.step, captured.members.count()) == ("grpo-3", 4, 3)
    stored = {m.response.content: m.reward for m in captured.members.select_related("response")}
    rewards = {c: a.json()["rewards"][0] for c, a in zip(contents, answers, strict=True)}
    assert stored == rewards  # without the EOS text, with each request's reward


def test_when_grading_the_group_fails_every_member_gets_the_reason(
    live_server: Any, reward_project: Project, token: str
) -> None:
    grader = grader_of(reward_project, "pairwise")  # the project has no judge endpoint
    url = get_reward_url(live_server.url, grader, group_size=2, wait_s=20)

    answers = post_all([url] * 2, [one_sample("t0", "GOOD answer 0")] * 2, token)

    assert [a.status_code for a in answers] == [409, 409]
    assert answers[0].json() == answers[1].json()
    assert "no judge endpoint" in answers[0].json()["detail"]


def test_the_schema_documents_the_gathering_parameters_on_every_get_reward_operation(
    client: Any,
) -> None:
    schema = client.get("/api/schema/?format=json").json()
    operations = [
        operation["post"] for path, operation in schema["paths"].items()
        if path.endswith("/get_reward")
    ]  # fmt: skip
    assert len(operations) == 3
    for operation in operations:
        query = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
        assert set(query) == {"group_size", "wait_s", "partial", "special_tokens"}
        assert query["partial"]["schema"]["enum"] == ["grade", "refuse"]
        assert query["special_tokens"]["schema"]["type"] == "array"


# Several processes ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _database_url() -> str:
    settings_dict = connection.settings_dict
    user, password = settings_dict["USER"], settings_dict["PASSWORD"]
    auth = f"{user}:{password}@" if password else f"{user}@" if user else ""
    host, port = settings_dict["HOST"] or "127.0.0.1", settings_dict["PORT"] or 5432
    return f"postgres://{auth}{host}:{port}/{settings_dict['NAME']}"


@pytest.fixture
def gunicorn_servers(fake_judge: FakeJudgeServer) -> Iterator[Callable[[int], list[str]]]:
    """`start(n)`: n gunicorn servers of one process each (the production configuration,
    gunicorn.conf.py) on the test database, sharing Redis as their cache; their base URLs."""
    if connection.vendor != "postgresql":
        pytest.skip("server processes need a database they can share: run with DATABASE_URL")
    service_required(REDIS_URL, what="Redis", variable="REWARD_GATHER_TEST_REDIS_URL")
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()  # no groups left over from an earlier run
    processes: list[subprocess.Popen[str]] = []

    def start(count: int) -> list[str]:
        env = dict(os.environ, DATABASE_URL=_database_url(), CACHE_URL=REDIS_URL,
                   WEB_CONCURRENCY="1", WEB_THREADS="16",
                   JUDGE_PRIVATE_HOSTS=",".join(django_settings.JUDGE_PRIVATE_HOSTS))  # fmt: skip
        urls = []
        for _ in range(count):
            port = _free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}"], cwd=REPO, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            ))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            deadline = time.monotonic() + 60
            while not _reachable(url):
                assert time.monotonic() < deadline, f"gunicorn at {url} did not start"
                time.sleep(0.2)
        return urls

    try:
        yield start
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                output, _ = process.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
            sys.stdout.write(output[-3000:])


def test_two_server_processes_gather_one_group_through_the_shared_cache(
    reward_project: Project, judge: JudgeEndpoint, token: str,
    gunicorn_servers: Callable[[int], list[str]],
) -> None:  # fmt: skip
    grader = grader_of(reward_project, "pairwise")
    first, second = gunicorn_servers(2)
    rows = [(task, r) for task in ("t0", "t2") for r in group(task)]
    # OpenRLHF rotates over comma-separated reward URLs: each group's samples reach both.
    urls = [get_reward_url((first, second)[n % 2], grader, group_size=3, wait_s=30)
            for n in range(len(rows))]  # fmt: skip

    answers = post_all(urls, [one_sample(t, r["content"]) for t, r in rows], token)

    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert {a.json()["extra_logs"]["group_incomplete"][0] for a in answers} == {0.0}
    expected = in_app_rewards(reward_project, judge, grader)
    assert [a.json()["rewards"] for a in answers] == [[expected[r["id"]]] for _, r in rows]
