"""The reward API end to end: project tokens, limits, and rewards from the real engine over
real HTTP to the fake judge, which must equal what in-app grading stored for the same task."""

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.grading import grading_run_execute
from graders.models import ApiToken, Grade, JudgeEndpoint, Metagrader, RewardUsage
from graders.services import grader_promote, grading_run_start, metagrader_register
from graders.tokens import token_create, token_revoke
from labeling.imports import jsonl_import
from labeling.models import Project, Response, Task
from tests.fakes.openai_server import FakeJudgeServer
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db

QUALITY = (("GOOD", 0.9), ("OKAY", 0.5), ("POOR", 0.2))


def rank(text: str) -> int:
    return next((i for i, word in enumerate(("POOR", "OKAY", "GOOD")) if word in text), -1)


def quality_responder(body: dict[str, Any]) -> str:
    """Scores by the quality word in the fenced response; writes rubrics; compares."""
    text = str(body["messages"][-1]["content"])
    schema = json.dumps(body.get("response_format", {}))
    if '"criteria"' in schema:
        return json.dumps({"criteria": [{"text": "States the cap.", "weight": 2},
                                        {"text": "Cites clause 4.", "weight": 1}]})  # fmt: skip
    if '"winner"' in schema:
        middle = text.index("Response B")
        rank_a, rank_b = rank(text[text.index("Response A") : middle]), rank(text[middle:])
        return json.dumps({"winner": "a" if rank_a > rank_b else "b" if rank_b > rank_a else "tie"})
    if '"verdict"' in schema:
        return json.dumps({"verdict": "GOOD" in text})
    if '"score"' in schema:
        return json.dumps({"score": 0.9 if "GOOD" in text else 0.5 if "OKAY" in text else 0.1})
    return "{}"


@pytest.fixture(autouse=True)
def rate_counts_cleared() -> None:
    cache.clear()


@pytest.fixture
def reward_project(project: Project, tmp_path: Path) -> Project:
    records: list[dict[str, Any]] = []
    for t in range(3):
        records.append({"type": "task", "id": f"t{t}", "prompt": f"Review contract {t}", "split": "eval",
                        "documents": [{"id": "spa", "title": "SPA", "text": "Clause 4: cap of 10%."}]})  # fmt: skip
        for r, (word, truth) in enumerate(QUALITY):
            records.append({"type": "response", "id": f"t{t}/r{r}", "task": f"t{t}",
                            "content": f"{word} answer {t}"})  # fmt: skip
            records.append({"type": "score", "response": f"t{t}/r{r}", "value": truth})
    jsonl_import(project=project, path=write_jsonl(tmp_path / "r.jsonl", records))
    return project


@pytest.fixture
def judge(reward_project: Project, fake_judge: FakeJudgeServer) -> JudgeEndpoint:
    fake_judge.responder = quality_responder
    return JudgeEndpoint.objects.create(
        project=reward_project, name="fake", base_url=fake_judge.base_url, model="fake-judge",
        is_default=True,
    )  # fmt: skip


def grader_of(project: Project, kind: str) -> Metagrader:
    return metagrader_register(
        project=project, program=baseline_program(kind).to_json(), origin="baseline"
    )


@pytest.fixture
def scalar(reward_project: Project, judge: JudgeEndpoint) -> Metagrader:
    return grader_of(reward_project, "scalar")


@pytest.fixture
def token(reward_project: Project) -> str:
    return token_create(project=reward_project, name="trainer", scopes=["reward"])[1]


def bearer(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}


def reward_url(grader: Metagrader, slug: str = "acme", name: str = "api-reward") -> str:
    return reverse(name, args=[slug, grader.pk])


def group(task: str) -> list[dict[str, str]]:
    return [
        {"id": r.external_id, "content": r.content}
        for r in Response.objects.filter(task__external_id=task).order_by("external_id")
    ]


def post(client: Client, url: str, body: Any, headers: dict[str, str]) -> Any:
    return client.post(url, body, content_type="application/json", headers=headers)


# Authentication and scope ----------------------------------------------------------------------


def test_missing_malformed_unknown_and_revoked_tokens_get_401(
    client: Client, scalar: Metagrader, token: str, admin_user: Any
) -> None:
    url = reward_url(scalar)
    body = {"task_id": "t0", "responses": group("t0")}
    missing = post(client, url, body, {})
    assert missing.status_code == 401 and missing["WWW-Authenticate"].startswith("Bearer")
    assert "detail" in missing.json()
    for header in ("Bearer", "Bearer a b", "Bearer nope", f"Bearer {token}x{'0' * 3}",
                   "Bearer wbt_zzzzzzzz_" + "a" * 43, "Basic !!!"):  # fmt: skip
        response = post(client, url, body, {"Authorization": header})
        assert response.status_code == 401, header
        assert response.json()["detail"]
    unknown = token.rsplit("_", 1)[0] + "_" + "A" * 43
    assert post(client, url, body, bearer(unknown)).json()["detail"] == "Invalid token."
    token_revoke(token=ApiToken.objects.get())
    revoked = post(client, url, body, bearer(token))
    assert revoked.status_code == 401 and revoked.json()["detail"] == "This token was revoked."
    # A session does not open the token API, even an admin's.
    client.force_login(admin_user)
    assert post(client, url, body, {}).status_code == 401
    assert RewardUsage.objects.count() == 0


def test_other_projects_token_gets_404_and_wrong_scope_403(
    client: Client, scalar: Metagrader, token: str
) -> None:
    other = Project.objects.create(slug="other", name="Other")
    foreign = token_create(project=other, name="theirs", scopes=["reward"])[1]
    body = {"task_id": "t0", "responses": group("t0")}
    assert post(client, reward_url(scalar), body, bearer(foreign)).status_code == 404
    # ...also for their own slug with our grader's id: graders are looked up in the project.
    assert post(client, reward_url(scalar, "other"), body, bearer(foreign)).status_code == 404
    assert post(client, reward_url(scalar, "other"), body, bearer(token)).status_code == 404
    export_only = token_create(project=scalar.project, name="bundles", scopes=["export"])[1]
    denied = post(client, reward_url(scalar), body, bearer(export_only))
    assert denied.status_code == 403 and "reward" in denied.json()["detail"]


def test_basic_auth_with_the_token_as_password_works_for_openrlhf(
    client: Client, scalar: Metagrader, token: str
) -> None:
    # OpenRLHF posts with `requests` and no headers: credentials go in the URL, which
    # requests sends as Basic auth.
    basic = base64.b64encode(f"token:{token}".encode()).decode()
    response = post(
        client, reward_url(scalar, name="api-get-reward"),
        {"query": ["Q: hi\nA: GOOD"], "prompts": ["Q: hi\nA:"]}, {"Authorization": f"Basic {basic}"},
    )  # fmt: skip
    assert response.status_code == 200, response.json()


def test_last_used_is_written_at_most_once_a_minute(
    client: Client, scalar: Metagrader, token: str
) -> None:
    body = {"task_id": "t0", "responses": group("t0")[:1]}
    assert post(client, reward_url(scalar), body, bearer(token)).status_code == 200
    first = ApiToken.objects.get().last_used_at
    assert first is not None
    assert post(client, reward_url(scalar), body, bearer(token)).status_code == 200
    assert ApiToken.objects.get().last_used_at == first


# Limits -------------------------------------------------------------------------------------------


def test_body_over_the_limit_gets_413_json(
    client: Client, scalar: Metagrader, token: str, settings: Any
) -> None:
    settings.REWARD_API_MAX_BYTES = 1000
    body = {"task_id": "t0", "responses": [{"content": "x" * 2000}]}
    response = post(client, reward_url(scalar), body, bearer(token))
    assert response.status_code == 413
    assert "1000 bytes" in response.json()["detail"]
    assert RewardUsage.objects.count() == 0


def test_the_default_limit_is_2_mib_and_answers_json_past_djangos_own(
    client: Client, scalar: Metagrader, token: str
) -> None:
    # Past DATA_UPLOAD_MAX_MEMORY_SIZE (also 2 MiB) Django itself would answer an HTML 400.
    body = {"task_id": "t0", "responses": [{"content": "x" * 999_000}] * 3}
    response = post(client, reward_url(scalar), body, bearer(token))
    assert response.status_code == 413 and str(2 * 1024 * 1024) in response.json()["detail"]


def test_malformed_json_and_wrong_shapes_get_400_naming_the_field(
    client: Client, scalar: Metagrader, token: str
) -> None:
    url = reward_url(scalar)
    broken = post(client, url, '{"task_id": "t0", "responses": [', bearer(token))
    assert broken.status_code == 400 and "JSON parse error" in broken.json()["detail"]
    assert post(client, url, "[1, 2]", bearer(token)).status_code == 400
    too_many = post(client, url, {"task_id": "t0",
                                  "responses": [{"content": f"r{i}"} for i in range(65)]}, bearer(token))  # fmt: skip
    assert too_many.status_code == 400 and "64" in str(too_many.json()["responses"])
    too_long = post(client, url, {"task_id": "t0", "responses": [{"content": "x" * 1_000_001}]},
                    bearer(token))  # fmt: skip
    assert too_long.status_code == 400 and "content" in too_long.json()["responses"]["0"]
    both = post(client, url, {"task_id": "t0", "task": {"prompt": "p"},
                              "responses": [{"content": "a"}]}, bearer(token))  # fmt: skip
    assert both.status_code == 400 and "task" in both.json()
    neither = post(client, url, {"responses": [{"content": "a", "messages": []}]}, bearer(token))
    assert neither.status_code == 400
    unknown_task = post(client, url, {"task_id": "nope", "responses": [{"content": "a"}]},
                        bearer(token))  # fmt: skip
    assert unknown_task.status_code == 400 and "task_id" in unknown_task.json()
    repeated = post(client, url, {"task_id": "t0", "responses": [{"id": "1", "content": "a"},
                                                                 {"content": "b"}]}, bearer(token))  # fmt: skip
    assert repeated.status_code == 400 and "responses" in repeated.json()
    form = client.post(url, {"task_id": "t0"}, headers=bearer(token))  # multipart, not JSON
    assert form.status_code == 415 and "detail" in form.json()
    assert RewardUsage.objects.count() == 0


def test_rate_limit_per_token_gets_429_with_retry_after(
    client: Client, scalar: Metagrader, reward_project: Project
) -> None:
    slow = token_create(project=reward_project, name="slow", scopes=["reward"], rate_per_minute=2)
    slow_raw = slow[1]
    other = token_create(project=reward_project, name="other", scopes=["reward"])[1]
    body = {"task_id": "t0", "responses": group("t0")[:1]}
    assert [post(client, reward_url(scalar), body, bearer(slow_raw)).status_code
            for _ in range(2)] == [200, 200]  # fmt: skip
    limited = post(client, reward_url(scalar), body, bearer(slow_raw))
    assert limited.status_code == 429
    assert 1 <= int(limited["Retry-After"]) <= 60 and "throttled" in limited.json()["detail"]
    # The limit is per token.
    assert post(client, reward_url(scalar), body, bearer(other)).status_code == 200


# Rewards --------------------------------------------------------------------------------------


def in_app_rewards(project: Project, endpoint: JudgeEndpoint, grader: Metagrader) -> dict[str, Any]:
    run = grading_run_start(project=project, metagrader=grader, endpoint=endpoint, split="eval")
    assert grading_run_execute(run_id=run.pk)["status"] == "succeeded"
    return dict(Grade.objects.filter(run=run).values_list("response__external_id", "reward"))


@pytest.mark.parametrize("kind", ["scalar", "pairwise", "rubric"])
def test_rewards_equal_in_app_grading_and_cached_calls_are_free(
    client: Client, reward_project: Project, judge: JudgeEndpoint, token: str,
    fake_judge: FakeJudgeServer, kind: str,
) -> None:  # fmt: skip
    grader = grader_of(reward_project, kind)
    expected = in_app_rewards(reward_project, judge, grader)
    assert len(set(expected.values())) > 1  # the rewards tell the responses apart
    calls = fake_judge.call_count
    for task in ("t0", "t1", "t2"):
        responses = group(task)
        answer = post(client, reward_url(grader),
                      {"task_id": task, "responses": responses, "detail": True}, bearer(token))  # fmt: skip
        assert answer.status_code == 200, answer.json()
        body = answer.json()
        assert body["grader"] == {"id": grader.pk, "name": grader.name,
                                  "content_hash": grader.content_hash}  # fmt: skip
        assert body["rewards"] == [expected[r["id"]] for r in responses]
        assert [r["id"] for r in body["results"]] == [r["id"] for r in responses]
        assert all(r["error"] is None for r in body["results"])
        if kind == "rubric":  # the stored generated rubric, criterion by criterion
            assert [c["text"] for c in body["results"][0]["criteria"]] == [
                "States the cap.", "Cites clause 4."]  # fmt: skip
    assert fake_judge.call_count == calls  # every judge answer came from the database cache
    usage = RewardUsage.objects.get(metagrader=grader)
    assert (usage.requests, usage.responses) == (3, 9)


def test_an_inline_task_grades_like_the_stored_one(
    client: Client, reward_project: Project, judge: JudgeEndpoint, scalar: Metagrader,
    token: str, fake_judge: FakeJudgeServer,
) -> None:  # fmt: skip
    expected = in_app_rewards(reward_project, judge, scalar)
    calls = fake_judge.call_count
    stored = Task.objects.get(external_id="t1")
    inline = {"prompt": stored.prompt, "documents": [{"id": "spa", "title": "SPA",
                                                      "text": "Clause 4: cap of 10%."}]}  # fmt: skip
    answer = post(client, reward_url(scalar), {"task": inline, "responses": group("t1")},
                  bearer(token))  # fmt: skip
    assert answer.json()["rewards"] == [expected[f"t1/r{r}"] for r in range(3)]
    assert fake_judge.call_count == calls
    new = post(client, reward_url(scalar), {"task": {"prompt": "Another contract"},
                                            "responses": [{"content": "OKAY and new"}]}, bearer(token))  # fmt: skip
    assert new.json()["rewards"] == [0.5] and fake_judge.call_count == calls + 1


def test_trajectories_grade_like_imported_ones(
    client: Client, reward_project: Project, judge: JudgeEndpoint, scalar: Metagrader,
    token: str, tmp_path: Path, fake_judge: FakeJudgeServer,
) -> None:  # fmt: skip
    messages = [
        {"role": "user", "content": "Cap?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"clause": 4}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "10%"},
        {"role": "assistant", "content": "GOOD: the cap is 10%."},
    ]  # fmt: skip
    jsonl_import(project=reward_project, path=write_jsonl(tmp_path / "m.jsonl", [
        {"type": "response", "id": "t0/agent", "task": "t0", "messages": messages}]))  # fmt: skip
    expected = in_app_rewards(reward_project, judge, scalar)["t0/agent"]
    calls = fake_judge.call_count
    answer = post(client, reward_url(scalar), {"task_id": "t0", "responses": [
        {"id": "agent", "messages": messages}]}, bearer(token))  # fmt: skip
    assert answer.json()["rewards"] == [expected] and fake_judge.call_count == calls


def test_judge_failures_are_null_rewards_with_the_reason(
    client: Client, scalar: Metagrader, token: str, fake_judge: FakeJudgeServer
) -> None:
    fake_judge.responder = lambda body: "not json at all"
    answer = post(client, reward_url(scalar), {"task": {"prompt": "p"},
                                               "responses": [{"content": "x"}]}, bearer(token))  # fmt: skip
    assert answer.status_code == 200
    assert answer.json()["rewards"] == [None] and answer.json()["results"][0]["error"]


def test_selected_grader_endpoint_follows_promotion(
    client: Client, reward_project: Project, scalar: Metagrader, token: str
) -> None:
    url = reverse("api-reward-selected", args=["acme", "scalar"])
    body = {"task_id": "t0", "responses": group("t0")}
    assert post(client, url, body, bearer(token)).status_code == 404  # nothing selected yet
    grader_promote(project=reward_project, metagrader=scalar)
    answer = post(client, url, body, bearer(token))
    assert answer.status_code == 200 and answer.json()["grader"]["id"] == scalar.pk
    unknown = reverse("api-reward-selected", args=["acme", "nonsense"])
    assert post(client, unknown, body, bearer(token)).status_code == 404
    assert RewardUsage.objects.get(metagrader=scalar).requests == 1
    pairwise = grader_of(reward_project, "pairwise")
    grader_promote(project=reward_project, metagrader=pairwise)
    other_kind = reverse("api-reward-selected", args=["acme", "pairwise"])
    assert post(client, other_kind, body, bearer(token)).json()["grader"]["id"] == pairwise.pk
    assert post(client, url, body, bearer(token)).json()["grader"]["id"] == scalar.pk
    described = baseline_program("scalar").to_json() | {"description": "A later scalar."}
    later = metagrader_register(project=reward_project, program=described, origin="baseline")
    assert later.pk != scalar.pk
    grader_promote(project=reward_project, metagrader=later)  # the newest version wins
    assert post(client, url, body, bearer(token)).json()["grader"]["id"] == later.pk


def test_no_judge_endpoint_is_a_409(client: Client, reward_project: Project, token: str) -> None:
    grader = grader_of(reward_project, "scalar")
    answer = post(client, reward_url(grader), {"task_id": "t0", "responses": group("t0")},
                  bearer(token))  # fmt: skip
    assert answer.status_code == 409 and "judge endpoint" in answer.json()["detail"]


def test_a_missing_judge_key_is_a_503_that_says_which_variable(
    client: Client,
    scalar: Metagrader,
    judge: JudgeEndpoint,
    token: str,
    monkeypatch: Any,
    fake_judge: FakeJudgeServer,
    settings: Any,
) -> None:
    monkeypatch.delenv("JUDGE_KEY_REWARD_TEST", raising=False)
    settings.JUDGE_API_KEY_HOSTS = [f"JUDGE_KEY_REWARD_TEST={fake_judge.host_port}"]
    JudgeEndpoint.objects.filter(pk=judge.pk).update(api_key_env="JUDGE_KEY_REWARD_TEST")
    answer = post(client, reward_url(scalar), {"task_id": "t0", "responses": group("t0")},
                  bearer(token))  # fmt: skip
    assert answer.status_code == 503 and "JUDGE_KEY_REWARD_TEST" in answer.json()["detail"]


# OpenRLHF -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["scalar", "pairwise"])
def test_get_reward_speaks_openrlhf_and_matches_in_app_grading(
    client: Client, reward_project: Project, judge: JudgeEndpoint, token: str,
    fake_judge: FakeJudgeServer, kind: str,
) -> None:  # fmt: skip
    grader = grader_of(reward_project, kind)
    expected = in_app_rewards(reward_project, judge, grader)
    calls = fake_judge.call_count
    template = "<|user|>{}<|assistant|>"
    rows = [(task, r) for task in ("t2", "t0") for r in group(task)]  # groups interleave freely
    rows = rows[::2] + rows[1::2]
    prompts = [template.format(task) for task, _ in rows]
    answer = post(client, reward_url(grader, name="api-get-reward"), {
        "query": [prompt + r["content"] for prompt, (_, r) in zip(prompts, rows, strict=True)],
        "prompts": prompts, "labels": [task for task, _ in rows]}, bearer(token))  # fmt: skip
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["rewards"] == [expected[r["id"]] for _, r in rows]
    assert body["scores"] == body["rewards"]
    assert body["extra_logs"] == {"grader_failed": [0.0] * len(rows)}
    assert fake_judge.call_count == calls
    usage = RewardUsage.objects.get(metagrader=grader)
    assert (usage.requests, usage.responses) == (1, 6)


def test_get_reward_without_labels_grades_against_the_prompt_and_checks_shapes(
    client: Client, scalar: Metagrader, token: str
) -> None:
    url = reward_url(scalar, name="api-get-reward")
    answer = post(client, url, {"query": ["Q: cap?\nA: GOOD", "Q: cap?\nA: POOR"],
                                "prompts": ["Q: cap?\nA:"] * 2}, bearer(token))  # fmt: skip
    assert answer.json()["rewards"] == [0.9, 0.1]
    cut = post(client, url, {"query": ["abc"], "prompts": ["xyz"]}, bearer(token))
    assert cut.status_code == 400 and "0" in cut.json()["query"]
    uneven = post(client, url, {"query": ["a", "b"], "prompts": ["a"]}, bearer(token))
    assert uneven.status_code == 400 and "prompts" in uneven.json()


# What a request costs the database --------------------------------------------------------------


def test_a_reward_request_makes_seven_queries_and_parses_the_program_once(
    client: Client,
    scalar: Metagrader,
    token: str,
    django_assert_num_queries: Any,
    monkeypatch: Any,
) -> None:
    """Token, grader (without its program once parsed), task with its documents, judge
    endpoint, one judge-cache lookup for the whole group, the cache insert, the usage count."""
    import graders.reward_grading as reward_grading

    url = reward_url(scalar)
    first = post(client, url, {"task_id": "t0", "responses": group("t0")}, bearer(token))
    assert first.status_code == 200
    parses: list[Any] = []
    monkeypatch.setattr(reward_grading, "program_validate", lambda data: parses.append(data))
    fresh = [{"id": f"n{n}", "content": f"GOOD fresh answer {n}"} for n in range(4)]
    with django_assert_num_queries(7):
        again = post(client, url, {"task_id": "t0", "responses": fresh}, bearer(token))
    assert again.status_code == 200
    assert again.json()["rewards"] == [0.9] * 4
    assert parses == []


def test_the_judge_endpoint_is_the_latest_runs_else_the_projects_default(
    reward_project: Project, scalar: Metagrader, judge: JudgeEndpoint, admin_user: Any
) -> None:
    from graders.bundles import endpoint_for
    from graders.reward_grading import _endpoint_for

    assert _endpoint_for(scalar) == endpoint_for(scalar) == judge
    other = JudgeEndpoint.objects.create(
        project=reward_project, name="other", base_url=judge.base_url, model="other-judge"
    )
    grading_run_start(
        project=reward_project, metagrader=scalar, endpoint=other, task_ids=["t0"], user=admin_user
    )
    assert _endpoint_for(scalar) == endpoint_for(scalar) == other
    JudgeEndpoint.objects.filter(pk=judge.pk).update(is_default=False)
    lone = grader_of(reward_project, "rubric")
    assert _endpoint_for(lone) is endpoint_for(lone) is None


def test_stored_tasks_keep_their_documents_in_order_and_may_have_none(
    reward_project: Project, scalar: Metagrader
) -> None:
    from graders.reward_grading import _tasks_known
    from labeling.models import Document

    t1 = Task.objects.get(project=reward_project, external_id="t1")
    Document.objects.filter(task=t1).update(position=5)
    Document.objects.create(task=t1, external_id="annex", title="Annex", text="A.", position=1)
    Document.objects.filter(task__external_id="t2").delete()
    tasks = {task.id: task for task in _tasks_known(scalar, {"t1", "t2", "missing"}).values()}
    assert sorted(tasks) == ["t1", "t2"]
    assert [d.id for d in tasks["t1"].documents] == ["annex", "spa"]
    assert tasks["t1"].prompt == "Review contract 1"
    assert tasks["t2"].documents == ()


# What is written once the answer is sent ---------------------------------------------------


def test_answers_and_usage_are_stored_in_chunks_and_counted_by_upsert(
    client: Client, scalar: Metagrader, token: str, monkeypatch: Any
) -> None:
    """Eight new answers stored three to an INSERT, then the same eight again (conflicts left
    alone, no judge call); the usage row made by the first request and added to by the next."""
    import graders.reward_grading as reward_grading
    from graders.models import JudgeCall

    monkeypatch.setattr(reward_grading, "FLUSH_ROWS", 3)
    fresh = [{"id": f"n{n}", "content": f"GOOD answer number {n}"} for n in range(8)]
    before = JudgeCall.objects.count()
    for _ in range(2):
        answer = post(client, reward_url(scalar), {"task_id": "t0", "responses": fresh},
                      bearer(token))  # fmt: skip
        assert answer.json()["rewards"] == [0.9] * 8
    assert JudgeCall.objects.count() == before + 8
    stored = JudgeCall.objects.order_by("-id").first()
    assert stored is not None and json.loads(stored.result["text"]) == {"score": 0.9}
    usage = RewardUsage.objects.get(metagrader=scalar)
    assert (usage.requests, usage.responses) == (2, 16)
    assert usage.first_at <= usage.last_at


def test_a_failure_after_the_answer_is_sent_is_logged_and_the_answer_stands(
    client: Client, scalar: Metagrader, token: str, monkeypatch: Any, caplog: Any
) -> None:
    import graders.reward_api as reward_api

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("database went away")

    monkeypatch.setattr(reward_api, "reward_record", broken)
    answer = post(client, reward_url(scalar), {"task_id": "t0", "responses": group("t0")},
                  bearer(token))  # fmt: skip
    assert answer.status_code == 200 and answer.json()["rewards"] == [0.9, 0.5, 0.1]
    assert "storing a reward request's judge answers and usage failed" in caplog.text
    assert "database went away" in caplog.text
    assert not RewardUsage.objects.exists()


def test_hand_written_reads_build_what_the_orm_builds(
    reward_project: Project, scalar: Metagrader, token: str
) -> None:
    """Columns (graders/sql_rows.py) applies the database's converters: datetimes and JSON
    come back as the ORM gives them, on SQLite and PostgreSQL alike; deferred fields load on
    first access."""
    from django.utils import timezone

    from graders.reward_grading import _endpoint_for
    from graders.tokens import token_authenticate

    ApiToken.objects.update(last_used_at=timezone.now())
    ours = token_authenticate(raw=token)
    orm = ApiToken.objects.select_related("project").get(pk=ours.pk)
    for field in ApiToken._meta.concrete_fields:
        assert getattr(ours, field.attname) == getattr(orm, field.attname), field.name
    assert ours.scopes == ["reward"] and ours.last_used_at is not None
    assert ours.project.slug == orm.project.slug == "acme"
    endpoint = _endpoint_for(scalar)
    assert endpoint is not None
    reference = JudgeEndpoint.objects.get(pk=endpoint.pk)
    for field in JudgeEndpoint._meta.concrete_fields:
        assert getattr(endpoint, field.attname) == getattr(reference, field.attname), field.name
    from graders.reward_api import _grader_by_id

    grader = _grader_by_id(ours, scalar.pk)
    assert "program" in grader.get_deferred_fields()
    assert (grader.name, grader.content_hash) == (scalar.name, scalar.content_hash)
    assert grader.program == scalar.program  # loaded on first access
