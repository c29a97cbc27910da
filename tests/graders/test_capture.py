"""Capture in the reward API (graders/capture.py): sampling per token, whole groups, the
reservoir per task, dedup by content, run and step, inline tasks, and that experts never see
where a captured response came from. Requests go through the real API to the fake judge."""

import json
import logging
import random
import socket
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import graders.capture
from graders.aliases import alias_promote
from graders.capture import (
    CaptureGroup,
    CaptureOrigin,
    CaptureTask,
    CaptureWriter,
    capture_groups_store,
    capture_send,
    capture_store,
    get_reward_capture,
    group_json,
    group_parse,
    origin_json,
    reservoir_slot,
    reward_capture,
)
from graders.engine.baseline import baseline_program
from graders.engine.capture_client import capture_task_id
from graders.engine.programs import ResponseInput
from graders.models import (
    ApiToken,
    CapturedGroup,
    CapturedResponse,
    CaptureReservoir,
    CaptureSource,
    JudgeEndpoint,
    Metagrader,
)
from graders.services import metagrader_register
from graders.tokens import token_create, token_revoke
from labeling.imports import jsonl_import
from labeling.models import (
    Annotator,
    Preference,
    Project,
    QueueAssignment,
    QueuePair,
    QueueSlot,
    Response,
    Split,
    Task,
)
from labeling.queue import queue_build
from labeling.strategies import CoverageFirst
from tests.conftest import CeleryWorkers, _broker_pools_reset, wait_for
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_reward_api import grader_of, quality_responder
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db

RUN = "RUN-SECRET-9"
TOKEN_NAME = "TOKEN-SECRET-trainer"


@pytest.fixture(autouse=True)
def rate_counts_cleared() -> None:
    cache.clear()


@pytest.fixture(autouse=True)
def capture_inline(settings: Any) -> None:
    """Store drawn groups in the request's thread, inside the test's transaction; the writer
    thread has tests of its own below."""
    settings.CAPTURE_QUEUE_SIZE = 0


@pytest.fixture
def capture_project(project: Project, tmp_path: Path) -> Project:
    records = [
        {"type": "task", "id": "t0", "prompt": "Review contract 0", "split": "eval",
         "documents": [{"id": "spa", "title": "SPA", "text": "Clause 4: cap of 10%."}]},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "c.jsonl", records))
    return project


@pytest.fixture
def scalar(capture_project: Project, fake_judge: FakeJudgeServer) -> Metagrader:
    fake_judge.responder = quality_responder
    JudgeEndpoint.objects.create(
        project=capture_project, name="fake", base_url=fake_judge.base_url, model="fake-judge",
        is_default=True,
    )  # fmt: skip
    return grader_of(capture_project, "scalar")


def token_with(project: Project, *, rate: float | None, scopes: list[str] | None = None) -> str:
    token, raw = token_create(project=project, name=TOKEN_NAME, scopes=scopes or ["reward"])
    ApiToken.objects.filter(pk=token.pk).update(capture_rate=rate)
    return raw


def post(client: Client, url: str, body: Any, raw: str) -> Any:
    return client.post(
        url, body, content_type="application/json", headers={"Authorization": f"Bearer {raw}"}
    )


def reward_url(grader: Metagrader, name: str = "api-reward") -> str:
    return reverse(name, args=["acme", grader.pk])


def group_body(words: list[str], **extra: Any) -> dict[str, Any]:
    responses = [{"id": f"r{n}", "content": f"{word} answer"} for n, word in enumerate(words)]
    return {"task_id": "t0", "responses": responses, **extra}


# Sampling -------------------------------------------------------------------------------------


def test_captured_share_of_many_groups_is_the_rate(capture_project: Project) -> None:
    token = ApiToken(project=capture_project, capture_rate=0.05)
    grader = Metagrader(pk=1, project=capture_project)  # only drawn for: never read
    data = group_body(["GOOD", "POOR"])
    rng = random.Random(3)
    drawn = sum(
        reward_capture(token=token, metagrader=grader, data=data, rewards=[0.9, 0.1], rng=rng)
        is not None
        for _ in range(4000)
    )
    # Binomial(4000, 0.05): mean 200, standard deviation sqrt(4000 * 0.05 * 0.95) = 13.8;
    # the bound is 3.3 deviations either side.
    assert 155 <= drawn <= 245


def test_token_rate_overrides_the_project_default_and_zero_is_off(
    client: Client, capture_project: Project, scalar: Metagrader
) -> None:
    Project.objects.filter(pk=capture_project.pk).update(capture_rate=1.0)
    capture_project.refresh_from_db()
    off = token_with(capture_project, rate=0.0)
    default = token_with(capture_project, rate=None)
    assert post(client, reward_url(scalar), group_body(["GOOD", "POOR"]), off).status_code == 200
    assert not CapturedGroup.objects.exists()
    assert (
        post(client, reward_url(scalar), group_body(["GOOD", "POOR"]), default).status_code == 200
    )
    assert CapturedGroup.objects.count() == 1


# What is stored -------------------------------------------------------------------------------


def test_a_captured_group_is_whole_with_run_step_and_the_rewards_given(
    client: Client, capture_project: Project, scalar: Metagrader
) -> None:
    raw = token_with(capture_project, rate=1.0)
    body = group_body(["GOOD", "OKAY", "POOR"], run="grpo-7", step=12)
    answer = post(client, reward_url(scalar), body, raw)
    assert answer.status_code == 200
    group = CapturedGroup.objects.get()
    assert (group.run, group.step, group.source) == ("grpo-7", 12, CaptureSource.REWARD)
    assert (group.metagrader_id, group.token.name, group.slot) == (scalar.pk, TOKEN_NAME, 0)
    members = list(group.members.select_related("response").order_by("position"))
    assert [m.response.content for m in members] == ["GOOD answer", "OKAY answer", "POOR answer"]
    # The fake judge scores GOOD 0.9, OKAY 0.5, POOR 0.1; the stored rewards are the answer's.
    assert [m.reward for m in members] == answer.json()["rewards"] == [0.9, 0.5, 0.1]
    assert all(m.response.task.external_id == "t0" for m in members)
    assert not any(m.response.source_model or m.response.metadata for m in members)


def test_get_reward_keeps_whole_prompt_groups_only(
    client: Client, capture_project: Project, scalar: Metagrader
) -> None:
    token = token_create(project=capture_project, name="t", scopes=["reward"])[0]
    token.capture_rate = 0.5
    prompts = ["<u>Review contract 0<a>"] * 3 + ["<u>Another prompt<a>"] * 3
    words = ["GOOD", "OKAY", "POOR"] * 2
    payload = {"rewards": [0.9, 0.5, 0.1, 0.9, 0.0, 0.1],
               "extra_logs": {"grader_failed": [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]}}  # fmt: skip
    sizes: Counter[int] = Counter()
    rng = random.Random(5)
    for batch in range(30):
        data = {
            "query": [p + f"{w} answer {batch}" for p, w in zip(prompts, words, strict=True)],
            "prompts": prompts,
            "labels": ["t0"] * 3 + [None] * 3,
            "run": "r",
        }
        store = get_reward_capture(
            token=token, metagrader=scalar, data=data, payload=payload, rng=rng
        )
        if store is not None:
            store()
    for group in CapturedGroup.objects.all():
        sizes[group.members.count()] += 1
    # Every kept group has its prompt's three responses; at rate 0.5 over 60 prompt groups
    # some were kept and some were not.
    assert set(sizes) == {3} and 10 <= sizes[3] <= 50
    labeled = CapturedGroup.objects.filter(task__external_id="t0")
    inline = CapturedGroup.objects.exclude(task__external_id="t0")
    assert labeled.exists() and inline.exists()
    # The failed grade is stored as no reward, not as the 0.0 OpenRLHF was given.
    second = CapturedResponse.objects.filter(group__in=inline, position=1)
    assert set(second.values_list("reward", flat=True)) == {None}


def test_inline_tasks_get_a_stable_hashed_id_in_the_unassigned_split(
    client: Client, capture_project: Project, scalar: Metagrader
) -> None:
    raw = token_with(capture_project, rate=1.0)
    task = {"prompt": "Summarise deal 9", "documents": [{"title": "SPA", "text": "Clause 9."}]}
    for words in (["GOOD", "POOR"], ["OKAY", "POOR"]):
        responses = [{"content": f"{word} answer"} for word in words]
        assert (
            post(
                client, reward_url(scalar), {"task": task, "responses": responses}, raw
            ).status_code
            == 200
        )
    expected = capture_task_id(
        prompt="Summarise deal 9", instructions="", documents=[("doc1", "SPA", "Clause 9.")]
    )
    made = Task.objects.get(external_id=expected)
    assert made.split == Split.UNASSIGNED
    assert list(made.documents.values_list("external_id", "title", "text")) == [
        ("doc1", "SPA", "Clause 9.")
    ]
    # The second request's task is the same task; its repeated POOR answer is not stored again.
    assert CapturedGroup.objects.filter(task=made).count() == 2
    assert sorted(made.responses.values_list("content", flat=True)) == [
        "GOOD answer", "OKAY answer", "POOR answer",
    ]  # fmt: skip


def test_a_response_already_captured_for_the_task_is_not_stored_twice(
    client: Client, capture_project: Project, scalar: Metagrader
) -> None:
    raw = token_with(capture_project, rate=1.0)
    url = reward_url(scalar)
    post(client, url, group_body(["GOOD", "POOR"]), raw)
    post(client, url, group_body(["GOOD", "POOR"]), raw)  # all seen: not even offered
    post(client, url, group_body(["GOOD", "OKAY", "GOOD"]), raw)  # one new, one repeated twice
    assert CapturedGroup.objects.count() == 2
    assert CaptureReservoir.objects.get().groups_seen == 2
    newest = CapturedGroup.objects.order_by("-pk").first()
    assert newest is not None
    assert [m.response.content for m in newest.members.all()] == ["OKAY answer"]
    assert Response.objects.filter(content="GOOD answer").count() == 1


# The reservoir --------------------------------------------------------------------------------


def test_reservoir_keeps_each_of_n_items_with_probability_k_over_n() -> None:
    rng = random.Random(11)
    capacity, stream, trials = 3, 10, 20_000
    kept: Counter[int] = Counter()
    for _ in range(trials):
        slots: list[int | None] = [None] * capacity
        for item in range(stream):
            slot = reservoir_slot(seen=item + 1, capacity=capacity, rng=rng)
            if slot is not None:
                slots[slot] = item
        kept.update(item for item in slots if item is not None)
    # Every item, first or last, ends in the reservoir with probability 3 / 10 = 0.3; over
    # 20,000 trials its share has standard deviation sqrt(0.3 * 0.7 / 20000) = 0.0032.
    for item in range(stream):
        assert abs(kept[item] / trials - 0.3) < 0.015, item


class Fixed(random.Random):
    """randrange always gives `value`: the reservoir draw, scripted."""

    def __init__(self, value: int) -> None:
        super().__init__(0)
        self.value = value

    def randrange(self, *args: Any, **kwargs: Any) -> int:  # type: ignore[override]
        return self.value


def offer(project: Project, words: list[str], rng: random.Random, step: int = 0) -> None:
    group = CaptureGroup(
        CaptureTask(stored_id="t0", prompt=""),
        tuple(ResponseInput(str(n), f"{word} {step}") for n, word in enumerate(words)),
        tuple(0.5 for _ in words),
        "run",
        step,
    )
    capture_store(groups=[group], origin=CaptureOrigin(project, CaptureSource.BULK), rng=rng)


def test_storage_per_task_is_capped(capture_project: Project, settings: Any) -> None:
    settings.CAPTURE_GROUPS_PER_TASK = 4
    rng = random.Random(2)
    for step in range(40):
        offer(capture_project, ["GOOD", "POOR"], rng, step)
    assert CaptureReservoir.objects.get().groups_seen == 40
    assert sorted(CapturedGroup.objects.values_list("slot", flat=True)) == [0, 1, 2, 3]
    # Pushed-out groups took their responses with them: 4 groups of 2 remain.
    assert Response.objects.filter(task__external_id="t0").count() == 8
    assert CapturedResponse.objects.count() == 8


def test_a_worker_reads_no_token_or_grader_for_a_group_it_does_not_keep(
    scalar: Metagrader, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker stores by ids (origin_json): a group past a full reservoir costs its task,
    reservoir and dedup statements only; a kept one names its owners inside its INSERT."""
    settings.CAPTURE_GROUPS_PER_TASK = 1
    project = scalar.project
    token = token_create(project=project, name="t", scopes=["reward"])[0]
    origin = origin_json(CaptureOrigin(project, CaptureSource.REWARD, token.pk, scalar.pk))
    owners = ("graders_apitoken", "graders_metagrader")

    def store(words: list[str]) -> list[str]:
        body = group_body(words)
        group = CaptureGroup(
            CaptureTask(stored_id="t0", prompt=""),
            tuple(ResponseInput(r["id"], r["content"]) for r in body["responses"]),
            (0.9, 0.1), "run", 1,
        )  # fmt: skip
        with CaptureQueriesContext(connection) as ran:
            capture_groups_store([group_json(group)], origin)
        return [query["sql"] for query in ran.captured_queries]

    kept = store(["GOOD", "POOR"])
    assert not any(q.startswith("SELECT") and any(o in q for o in owners) for q in kept)
    assert (CapturedGroup.objects.get().metagrader_id, CapturedGroup.objects.get().token_id) == (
        scalar.pk,
        token.pk,
    )
    monkeypatch.setattr(graders.capture, "reservoir_slot", lambda **_: None)  # not kept
    skipped = store(["OKAY", "FINE"])
    assert CaptureReservoir.objects.get().groups_seen == 2 and CapturedGroup.objects.count() == 1
    assert not any(o in q for q in skipped for o in owners)


def label(a: Response, b: Response, annotator: Annotator) -> None:
    Preference.objects.create(task=a.task, response_a=a, response_b=b, choice="a",
                              provider="human", annotator=annotator)  # fmt: skip


def serve(a: Response, b: Response, annotator: Annotator) -> None:
    low, high = sorted((a, b), key=lambda r: r.pk)
    pair = QueuePair.objects.create(project=a.project, task=a.task, response_a=low, response_b=high)
    slot = QueueSlot.objects.create(pair=pair, project=a.project, claimed_by=annotator)
    QueueAssignment.objects.create(pair=pair, annotator=annotator, slot=slot, slot_order="ab")


@pytest.mark.parametrize("held", [label, serve], ids=["labeled", "served"])
def test_a_group_experts_labeled_or_were_served_keeps_its_responses_when_pushed_out(
    capture_project: Project, settings: Any, held: Any
) -> None:
    settings.CAPTURE_GROUPS_PER_TASK = 1
    offer(capture_project, ["GOOD", "POOR"], Fixed(0), step=1)
    first = CapturedGroup.objects.get()
    a, b = (m.response for m in first.members.all())
    held(a, b, Annotator.objects.create(project=capture_project, name="eve"))
    offer(capture_project, ["OKAY", "POOR"], Fixed(0), step=2)  # draws slot 0 of 1
    first.refresh_from_db()
    assert first.slot is None and first.members.count() == 2
    assert CapturedGroup.objects.get(slot=0).step == 2
    offer(capture_project, ["GOOD", "OKAY"], Fixed(0), step=3)  # unlabeled step 2 is deleted
    assert sorted(CapturedGroup.objects.values_list("step", flat=True)) == [1, 3]
    assert not Response.objects.filter(content="OKAY 2").exists()


# Validation and failures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"run": 5}, "run"), ({"run": ""}, "run"), ({"step": "3"}, "step"), ({"step": 1.5}, "step"),
     ({"step": True}, "step"), ({"step": -1}, "step")],
)  # fmt: skip
def test_bad_run_or_step_is_a_400_naming_the_field(
    client: Client, capture_project: Project, scalar: Metagrader, extra: dict[str, Any], field: str
) -> None:
    raw = token_with(capture_project, rate=1.0)
    answer = post(client, reward_url(scalar), group_body(["GOOD"], **extra), raw)
    assert answer.status_code == 400 and field in answer.json()
    query = {"query": ["p GOOD"], "prompts": ["p "], **extra}
    answer = post(client, reward_url(scalar, "api-get-reward"), query, raw)
    assert answer.status_code == 400 and field in answer.json()
    assert not CapturedGroup.objects.exists()


def test_a_failing_capture_never_fails_the_reward_answer(
    client: Client,
    capture_project: Project,
    scalar: Metagrader,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk full")

    monkeypatch.setattr(graders.capture, "_group_store", broken)
    raw = token_with(capture_project, rate=1.0)
    with caplog.at_level(logging.ERROR, logger="graders.reward_api"):
        answer = post(client, reward_url(scalar), group_body(["GOOD", "POOR"]), raw)
    assert answer.status_code == 200 and answer.json()["rewards"] == [0.9, 0.1]
    assert "capturing a reward request's groups failed" in caplog.text


def test_a_revoked_token_captures_nothing(
    client: Client, capture_project: Project, scalar: Metagrader
) -> None:
    token, raw = token_create(project=capture_project, name="t", scopes=["reward"])
    ApiToken.objects.filter(pk=token.pk).update(capture_rate=1.0)
    token_revoke(token=token)
    assert post(client, reward_url(scalar), group_body(["GOOD", "POOR"]), raw).status_code == 401
    assert not CapturedGroup.objects.exists() and not Response.objects.exists()


# Blind to origin ------------------------------------------------------------------------------


def test_experts_never_see_where_a_captured_response_came_from(
    client: Client, capture_project: Project, scalar: Metagrader, expert_user: User
) -> None:
    raw = token_with(capture_project, rate=1.0)
    body = group_body(["GOOD", "POOR"], run=RUN, step=4242)
    assert post(client, reward_url(scalar), body, raw).status_code == 200
    queue_build(project=capture_project, strategy=CoverageFirst(), dimensions=[None])
    expert = Client()
    expert.force_login(expert_user)
    label = expert.get(reverse("label", args=["acme"])).content.decode()
    assert "GOOD answer" in label and "POOR answer" in label
    task_page = expert.get(reverse("task-detail", args=["acme", "t0"])).content.decode()
    api = expert.get(reverse("api-task", args=["acme", "t0"])).content.decode()
    assert "GOOD answer" in task_page
    for page in (label, task_page, api):
        for secret in (RUN, "4242", TOKEN_NAME, scalar.name, "captur", "0.9"):
            assert secret not in page, secret
    assert json.loads(api)  # the API page is JSON, read as a whole above


@pytest.mark.django_db(transaction=True)
def test_concurrent_captures_of_one_task_count_every_group_and_share_no_slot(
    settings: Any,
) -> None:
    settings.CAPTURE_GROUPS_PER_TASK = 8
    project = Project.objects.create(slug="acme", name="Acme")
    Task.objects.create(project=project, external_id="t0", prompt="Review contract 0")
    failures: list[BaseException] = []

    def capture_many(worker: int) -> None:
        rng = random.Random(worker)
        try:
            for step in range(10):
                offer(project, [f"GOOD w{worker}", f"POOR w{worker}"], rng, step)
        except BaseException as exc:  # reported below, with the worker's thread gone
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=capture_many, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    # 40 distinct groups offered; the reservoir counted each once and holds 8, one per slot.
    assert CaptureReservoir.objects.get().groups_seen == 40
    assert sorted(CapturedGroup.objects.values_list("slot", flat=True)) == list(range(8))
    assert Response.objects.count() == CapturedResponse.objects.count() == 16


def test_admins_set_a_tokens_capture_rate_on_the_tokens_page(
    client: Client, capture_project: Project, admin_user: User
) -> None:
    client.force_login(admin_user)
    url = reverse("api-tokens", args=["acme"])
    form = {"name": "grpo", "scopes": ["reward", "capture"], "rate_per_minute": 60}
    refused = client.post(url, form | {"capture_rate": "1.5"})
    assert refused.status_code == 400 and "capture_rate" in refused.context["form"].errors
    assert client.post(url, form | {"capture_rate": "0.25"}).status_code == 302
    assert client.post(url, form | {"name": "default"}).status_code == 302
    rates = dict(ApiToken.objects.values_list("name", "capture_rate"))
    assert rates == {"grpo": 0.25, "default": None}
    listing = client.get(url).content.decode()
    assert '<td class="num">0.25</td>' in listing and '<td class="num">project\'s</td>' in listing


def test_the_schema_documents_run_and_step_on_both_request_shapes(client: Client) -> None:
    schema = json.loads(client.get("/api/schema/?format=json").content)
    for shape in ("RewardIn", "GetRewardIn"):
        properties = schema["components"]["schemas"][shape]["properties"]
        run, step = properties["run"], properties["step"]
        assert (run["type"], run["minLength"], run["maxLength"]) == ("string", 1, 200)
        assert (step["type"], step["minimum"]) == ("integer", 0)
        assert "captured" in run["description"] and "captured" in step["description"]


def test_a_grader_addressed_by_alias_captures_with_the_version_that_graded(
    client: Client, capture_project: Project, scalar: Metagrader
) -> None:
    alias_promote(project=capture_project, name="production", metagrader=scalar)
    raw = token_with(capture_project, rate=1.0)
    url = reverse("api-get-reward-alias", args=["acme", "production"])
    query = {"query": ["<u>x<a>GOOD answer", "<u>x<a>POOR answer"], "prompts": ["<u>x<a>"] * 2}
    answer = post(client, url, query | {"run": "grpo-9", "step": 3}, raw)
    assert answer.status_code == 200 and answer["X-Grader-Version"] == scalar.content_hash
    group = CapturedGroup.objects.get()
    assert (group.metagrader_id, group.run, group.step) == (scalar.pk, "grpo-9", 3)
    assert group.source == CaptureSource.GET_REWARD and group.members.count() == 2


# The writer thread ----------------------------------------------------------------------------


def run_group(run: str, responses: int = 2) -> CaptureGroup:
    """A group told apart by its run's name."""
    return CaptureGroup(
        CaptureTask("t0", ""),
        tuple(ResponseInput(str(n), f"answer {n}") for n in range(responses)),
        (None,) * responses,
        run,
    )


def writer_origin(token_id: int) -> CaptureOrigin:
    return CaptureOrigin(Project(pk=1, slug="acme"), CaptureSource.REWARD, token_id, 1)


class SentMessages(list[tuple[int | None, list[str]]]):
    """A writer's sender that keeps what each message would carry: its token, its runs."""

    def __call__(self, groups: Any, origin: CaptureOrigin) -> None:
        self.append((origin.token_id, [group.run for group in groups]))


def test_a_full_writer_drops_and_counts_instead_of_blocking(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sent = SentMessages()
    writer = CaptureWriter(size=1, batch_s=0.0, send=sent)
    started, release = threading.Event(), threading.Event()

    def slow() -> list[CaptureGroup]:
        started.set()
        release.wait(timeout=30)
        return [run_group("slow")]

    assert writer.submit(slow, writer_origin(1))
    assert started.wait(timeout=10)  # the thread holds it; the queue (1) is empty again
    assert writer.submit(lambda: [run_group("queued")], writer_origin(1))
    # The request thread never waits (this test would hang here otherwise).
    assert not writer.submit(lambda: [run_group("dropped")], writer_origin(1))
    assert writer.dropped == 1 and "a drawn group was dropped" in caplog.text
    release.set()
    writer.queue.join()
    assert sent == [(1, ["slow"]), (1, ["queued"])]


def test_groups_drawn_together_leave_in_one_message_per_origin_within_a_size_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each send costs the web process's interpreter the same whatever it carries, so the
    groups queued within batch_s of the first go together, one message per origin; a
    message stops growing at CAPTURE_BATCH_RESPONSES responses, and a group that fails to
    build costs only itself."""
    sent = SentMessages()
    writer = CaptureWriter(size=16, batch_s=2.0, send=sent)
    release = threading.Event()

    def held() -> list[CaptureGroup]:  # keeps the others queued until all are in
        release.wait(timeout=30)
        return [run_group("a")]

    def broken() -> list[CaptureGroup]:
        raise ValueError("no such group")

    assert writer.submit(held, writer_origin(1))
    assert writer.submit(lambda: [run_group("b")], writer_origin(2))
    assert writer.submit(broken, writer_origin(1))
    assert writer.submit(lambda: [run_group("c")], writer_origin(1))
    release.set()
    writer.queue.join()
    assert sent == [(1, ["a", "c"]), (2, ["b"])]
    assert writer.failed == 1 and "building the groups of 1 requests failed" in caplog.text

    sent.clear()
    big = graders.capture.CAPTURE_BATCH_RESPONSES
    release.clear()
    assert writer.submit(held, writer_origin(1))  # 2 responses, then one group fills it
    assert writer.submit(lambda: [run_group("full", big)], writer_origin(1))
    assert writer.submit(lambda: [run_group("next")], writer_origin(1))
    release.set()
    writer.queue.join()
    assert sent == [(1, ["a", "full"]), (1, ["next"])]


@pytest.mark.worker
def test_the_writer_hands_drawn_groups_to_a_worker_which_stores_them(
    settings: Any, monkeypatch: pytest.MonkeyPatch, celery_workers: CeleryWorkers
) -> None:
    """The web process only sends the group: the worker (its own process, a real broker)
    stores it, with the token that sent it and without the grader that graded it, deleted
    between the draw and the store."""
    settings.CAPTURE_QUEUE_SIZE = 4
    monkeypatch.setattr(CaptureWriter, "_current", None)  # a writer of this size, this test's
    project = Project.objects.create(slug="acme", name="Acme", capture_rate=1.0)
    Task.objects.create(project=project, external_id="t0", prompt="Review contract 0")
    token = token_create(project=project, name="t", scopes=["reward"])[0]
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    celery_workers.start()
    store = reward_capture(
        token=token,
        metagrader=grader,
        data=group_body(["GOOD", "POOR"], step=5),
        rewards=[0.9, None],
    )
    assert store is not None
    Metagrader.objects.filter(pk=grader.pk).delete()
    store()
    writer = CaptureWriter.get()
    writer.queue.join()
    assert (writer.dropped, writer.failed) == (0, 0)
    assert wait_for(CapturedGroup.objects.exists, timeout=60), "no worker stored the group"
    group = CapturedGroup.objects.get()
    assert (group.step, group.token_id, group.source) == (5, token.pk, CaptureSource.REWARD)
    assert group.metagrader_id is None
    members = group.members.order_by("position")
    assert [(m.position, m.reward) for m in members] == [(0, 0.9), (1, None)]
    assert [m.response.content for m in members] == ["GOOD answer", "POOR answer"]


def test_with_the_broker_away_a_drawn_group_is_logged_and_lost_without_holding_anyone(
    settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from config.celery import app

    settings.CAPTURE_QUEUE_SIZE = 4
    monkeypatch.setattr(CaptureWriter, "_current", None)
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # a port that refuses connections
    previous = (app.conf.broker_url, app.conf.broker_transport_options)
    app.conf.broker_url = f"redis://127.0.0.1:{port}/0"
    app.conf.broker_transport_options = {}
    _broker_pools_reset(app)
    try:
        project = Project.objects.create(slug="acme", name="Acme", capture_rate=1.0)
        token = token_create(project=project, name="t", scopes=["reward"])[0]
        grader = Metagrader(pk=1, project=project)  # only drawn for: never read
        store = reward_capture(
            token=token, metagrader=grader, data=group_body(["GOOD", "POOR"]), rewards=[0.9, 0.1]
        )
        assert store is not None
        store()  # what the answer's close() runs: it raises nothing
        writer = CaptureWriter.get()
        writer.queue.join()
        assert writer.failed == 1 and "sending the groups of 1 requests failed" in caplog.text
    finally:
        app.conf.broker_url, app.conf.broker_transport_options = previous
        _broker_pools_reset(app)
    assert not CapturedGroup.objects.exists()


def test_a_capture_message_names_counts_in_its_headers_and_carries_the_groups_in_its_body(
    settings: Any,
) -> None:
    """Its argsrepr header is a summary made without walking the groups (Celery's default
    repr of them cost a quarter of the send), and never quotes their text."""
    from config.celery import app

    previous = (app.conf.broker_url, app.conf.broker_transport_options)
    app.conf.broker_url, app.conf.broker_transport_options = "memory://", {}
    _broker_pools_reset(app)
    try:
        project = Project.objects.create(slug="acme", name="Acme", capture_rate=1.0)
        origin = CaptureOrigin(project, CaptureSource.REWARD, token_id=3, metagrader_id=4)
        group = CaptureGroup(
            CaptureTask("t0", ""),
            (ResponseInput("0", "GOOD answer"), ResponseInput("1", "POOR answer")),
            (0.9, 0.1),
        )
        capture_send([group], origin)
        with app.connection_for_read() as connection:
            queue = connection.SimpleQueue(app.conf.task_default_queue)
            message = queue.get(timeout=5)
            message.ack()
            queue.close()
    finally:
        app.conf.broker_url, app.conf.broker_transport_options = previous
        _broker_pools_reset(app)
    headers = json.dumps(message.headers)
    assert "GOOD" not in headers and "POOR" not in headers
    assert message.headers["argsrepr"] == f"<1 groups, 2 responses for project {project.pk}>"
    args, _, _ = message.decode()
    assert [group_parse(g) for g in args[0]] == [group]
    assert args[1] == origin_json(origin)


def test_a_group_reads_back_from_its_message_as_it_was_sent() -> None:
    trajectory = (
        {"role": "user", "content": "Book it."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "book", "arguments": {"n": 2}}],
        },
        {"role": "tool", "content": "booked", "tool_call_id": "c1"},
    )
    group = CaptureGroup(
        CaptureTask(stored_id=None, prompt="<p>", instructions="be brief",
                    documents=(("d1", "SPA", "Clause 4"),)),
        (ResponseInput("0", "plain"), ResponseInput("1", "", trajectory)),
        (0.25, None),
        "grpo-1",
        7,
    )  # fmt: skip
    message = json.loads(json.dumps(group_json(group)))  # what the broker carries
    assert group_parse(message) == group
    assert group_parse(group_json(CaptureGroup(CaptureTask("t0", ""), (), ()))).step is None
