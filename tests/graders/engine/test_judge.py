"""The judge client against a fake OpenAI-compatible server on loopback (or httpx.MockTransport
where only the request body or the response shape matters). No Django, no database.

The `fake_judge` fixture comes from tests/fakes/openai_server.py via tests/conftest.py."""

import asyncio
import gzip
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from graders.engine.judge import (
    Budget,
    BudgetExhausted,
    CallsStopped,
    ChatRequest,
    ChatResult,
    JsonlFileCache,
    JudgeCache,
    JudgeClient,
    JudgeSettings,
    MemoryCache,
    MissingApiKey,
    Usage,
    _payload,
    request_key,
    retry_after_seconds,
)
from tests.fakes.openai_server import (
    FakeJudgeServer,
    Fault,
    ReceivedRequest,
    approx_tokens,
)

SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["score"],
}


def grade(text: str, schema: dict[str, Any] | None = SCORE_SCHEMA) -> ChatRequest:
    return ChatRequest(
        messages=(
            {"role": "system", "content": "Grade the response. Reply with JSON."},
            {"role": "user", "content": text},
        ),
        schema=schema,
        name="test-grade",
    )


def settings_for(base_url: str, **overrides: Any) -> JudgeSettings:
    return JudgeSettings(
        base_url=base_url, **{"model": "judge-test", "api_key_env": None, **overrides}
    )


def run(
    settings: JudgeSettings,
    requests: Sequence[ChatRequest],
    *,
    cache: JudgeCache | None = None,
    budget: Budget | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    backoff_cap_s: float = 0.01,
) -> tuple[list[ChatResult], Usage]:
    """Complete `requests` with a fresh client whose retry waits are milliseconds."""

    async def complete() -> tuple[list[ChatResult], Usage]:
        async with JudgeClient(
            settings, cache, budget, transport, backoff_base_s=0.001, backoff_cap_s=backoff_cap_s
        ) as client:
            return await client.complete_many(requests), client.usage

    return asyncio.run(complete())


def mock_transport(
    received: list[dict[str, Any]],
    *,
    content: str = '{"score": 0.5}',
    usage: dict[str, int] | None = None,
) -> httpx.MockTransport:
    """A transport that records request bodies and answers one chat completion."""

    def answer(request: httpx.Request) -> httpx.Response:
        received.append(json.loads(request.content))
        message = {"role": "assistant", "content": content}
        body: dict[str, Any] = {
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]
        }
        if usage is not None:
            body["usage"] = usage
        return httpx.Response(200, json=body)

    return httpx.MockTransport(answer)


# Retries


def test_429_waits_for_retry_after_then_succeeds(fake_judge: FakeJudgeServer) -> None:
    fake_judge.script(Fault("rate_limited", retry_after="0.3"))
    started = time.perf_counter()
    [result], usage = run(settings_for(fake_judge.base_url), [grade("a")], backoff_cap_s=1.0)
    # Jittered backoff alone would wait at most 1 ms: the 0.3 s came from Retry-After.
    assert time.perf_counter() - started >= 0.3
    assert result.parsed == {"score": 1.0}
    assert (fake_judge.call_count, usage.calls, usage.retries) == (2, 2, 1)


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("2", now) == 2.0
    assert retry_after_seconds("Sun, 01 Mar 2026 12:00:05 GMT", now) == 5.0
    assert retry_after_seconds("Sun, 01 Mar 2026 11:00:00 GMT", now) == 0.0
    assert retry_after_seconds("soon", now) is None
    assert retry_after_seconds(None, now) is None


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        # A fixed reason for the status, never the server's words (tests/security/
        # test_judge_egress.py).
        ("insufficient_quota", "HTTP 429: out of quota or credit"),
        ("bad_request", "HTTP 400: response format or schema refused"),
    ],
)
def test_quota_and_client_errors_are_not_retried(
    fake_judge: FakeJudgeServer, fault: Any, error: str
) -> None:
    fake_judge.script(Fault(fault))
    [result], usage = run(settings_for(fake_judge.base_url), [grade("a")])
    assert result.error is not None and result.error.startswith(error)
    assert result.parsed is None
    assert (fake_judge.call_count, usage.retries, usage.failures) == (1, 0, 1)


def answers(*responses: httpx.Response) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport that gives these responses in order, and the list of requests it saw."""
    queue, seen = list(responses), []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return queue.pop(0)

    return httpx.MockTransport(answer), seen


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (
            {
                "message": "Rate limit reached. Add a payment method at https://platform.openai.com/account/billing.",
                "code": "rate_limit_exceeded",
            },
            True,
        ),
        ({"message": "Quota exceeded for this project; check your billing."}, False),
        ({"message": "Too many requests."}, True),
        ({"message": "You have run out of credits.", "code": "insufficient_quota"}, False),
    ],
    ids=["rate-limit-code-wins-over-words", "quota-words-without-code", "plain", "quota-code"],
)
def test_429_classification_prefers_the_error_code(error: dict[str, Any], retried: bool) -> None:
    completion = {"choices": [{"message": {"content": '{"score": 0.5}'}}]}
    transport, seen = answers(
        httpx.Response(429, json={"error": error}), httpx.Response(200, json=completion)
    )
    [result], _ = run(settings_for("http://judge.test/v1"), [grade("a")], transport=transport)
    assert (len(seen), result.ok) == ((2, True) if retried else (1, False))


@pytest.mark.parametrize(
    "faults",
    [
        [Fault("server_error"), Fault("unavailable")],
        [Fault("hang")],
        [Fault("truncated_body")],
    ],
    ids=["500-then-503", "timeout", "truncated-body"],
)
def test_transient_failures_are_retried_until_success(
    fake_judge: FakeJudgeServer, faults: list[Fault]
) -> None:
    fake_judge.script(*faults)
    [result], usage = run(settings_for(fake_judge.base_url, timeout_s=0.2), [grade("a")])
    assert result.parsed == {"score": 1.0}
    assert fake_judge.call_count == len(faults) + 1
    assert usage.retries == len(faults)


def test_gives_up_after_max_retries_with_a_recorded_failure(fake_judge: FakeJudgeServer) -> None:
    fake_judge.script(*[Fault("server_error")] * 3)
    [result], usage = run(settings_for(fake_judge.base_url, max_retries=2), [grade("a")])
    assert result.error == "gave up after 3 attempts; last: HTTP 500: internal server error"
    assert result.parsed is None
    assert (fake_judge.call_count, usage.retries, usage.failures) == (3, 2, 1)


# Output


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("malformed_json", "unparseable judge output: no JSON object found"),
        ("non_json", "unparseable judge output: no JSON object found"),
    ],
)
def test_unusable_output_is_a_failure_never_a_score(
    fake_judge: FakeJudgeServer, fault: Any, error: str
) -> None:
    fake_judge.script(Fault(fault))
    [result], usage = run(settings_for(fake_judge.base_url), [grade("a")])
    assert (result.parsed, result.error) == (None, error)
    assert result.text  # what the judge wrote is kept for the person reading the failure
    assert usage.failures == 1


def test_output_outside_the_schema_is_a_failure_naming_the_rule(
    fake_judge: FakeJudgeServer,
) -> None:
    fake_judge.responder = lambda body: 'Sure! ```json\n{"score": 1.7}\n```'
    [result], _ = run(settings_for(fake_judge.base_url), [grade("a")])
    assert result.parsed is None
    assert result.error == "unparseable judge output: score: 1.7 is above the maximum 1"


def test_responder_scores_by_prompt_content(fake_judge: FakeJudgeServer) -> None:
    def score_if_documents_present(body: dict[str, Any]) -> str:
        prompt = " ".join(message["content"] for message in body["messages"])
        return '{"score": 0.9}' if "DOCUMENT: clause 4.2" in prompt else '{"score": 0.1}'

    fake_judge.responder = score_if_documents_present
    results, _ = run(
        settings_for(fake_judge.base_url),
        [grade("DOCUMENT: clause 4.2 ..."), grade("no documents")],
    )
    assert [result.parsed for result in results] == [{"score": 0.9}, {"score": 0.1}]
    assert fake_judge.any_prompt_contains("clause 4.2")
    assert not fake_judge.any_prompt_contains("secret reference answer")


def test_free_text_request_is_returned_unparsed() -> None:
    received: list[dict[str, Any]] = []
    [result], _ = run(
        settings_for("http://judge.test/v1"),
        [grade("a", schema=None)],
        transport=mock_transport(received, content="Plain words."),
    )
    assert (result.text, result.parsed, result.error) == ("Plain words.", None, None)
    assert "response_format" not in received[0]


def test_a_200_that_is_not_a_chat_completion_is_a_failure_and_not_cached() -> None:
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, json={"object": "list", "data": []})
    )
    cache = MemoryCache()
    [result], usage = run(
        settings_for("http://judge.test/v1"), [grade("a")], cache=cache, transport=transport
    )
    assert result.error is not None and result.error.startswith("invalid judge response: KeyError")
    assert (len(cache), usage.failures) == (0, 1)


# Cache


def test_rerun_of_finished_work_makes_no_http_calls(fake_judge: FakeJudgeServer) -> None:
    settings = settings_for(fake_judge.base_url, price_in_per_mtok=1.0, price_out_per_mtok=1.0)
    requests = [grade(f"response {index}") for index in range(10)]
    cache = MemoryCache()
    first, first_usage = run(settings, requests, cache=cache)
    second, second_usage = run(settings, requests, cache=cache)
    assert fake_judge.call_count == 10
    assert (first_usage.calls, first_usage.cache_hits) == (10, 0)
    assert (
        second_usage.calls,
        second_usage.cache_hits,
        second_usage.cost,
        second_usage.tokens_in,
    ) == (0, 10, 0.0, 0)
    assert [result.parsed for result in second] == [result.parsed for result in first]
    assert all(result.cached and result.cost == 0 for result in second)
    assert [result.request_key for result in second] == [result.request_key for result in first]


def test_failed_calls_are_not_cached_so_a_rerun_retries_them(fake_judge: FakeJudgeServer) -> None:
    fake_judge.script(Fault("bad_request"))
    cache = MemoryCache()
    [failed], _ = run(settings_for(fake_judge.base_url), [grade("a")], cache=cache)
    [retried], _ = run(settings_for(fake_judge.base_url), [grade("a")], cache=cache)
    assert (failed.ok, retried.ok, retried.cached, fake_judge.call_count) == (False, True, False, 2)


def test_unparseable_output_is_cached_and_stays_a_failure(fake_judge: FakeJudgeServer) -> None:
    fake_judge.script(Fault("non_json"))
    cache = MemoryCache()
    run(settings_for(fake_judge.base_url), [grade("a")], cache=cache)
    [again], usage = run(settings_for(fake_judge.base_url), [grade("a")], cache=cache)
    assert (again.cached, again.parsed, usage.failures, fake_judge.call_count) == (True, None, 1, 1)


def test_temperature_above_zero_bypasses_the_cache(fake_judge: FakeJudgeServer) -> None:
    settings = settings_for(fake_judge.base_url, temperature=0.7)
    cache = MemoryCache()
    run(settings, [grade("a")], cache=cache)
    [result], usage = run(settings, [grade("a")], cache=cache)
    assert (fake_judge.call_count, usage.cache_hits, result.cached, len(cache)) == (2, 0, False, 0)


def test_jsonl_file_cache_persists_across_clients(
    fake_judge: FakeJudgeServer, tmp_path: Path
) -> None:
    path = tmp_path / "cache" / "judge.jsonl"
    settings = settings_for(fake_judge.base_url)
    run(settings, [grade("a"), grade("b")], cache=JsonlFileCache(path))
    with path.open("ab") as torn:
        torn.write('{"key": "half a line, cut inside \u00e9'.encode()[:-1])  # killed mid-write
    results, usage = run(settings, [grade("a"), grade("b")], cache=JsonlFileCache(path))
    assert (fake_judge.call_count, usage.cache_hits) == (2, 2)
    assert [result.parsed for result in results] == [{"score": 1.0}, {"score": 1.0}]
    run(settings, [grade("c")], cache=JsonlFileCache(path))  # written after the torn line
    _, usage = run(settings, [grade("a"), grade("b"), grade("c")], cache=JsonlFileCache(path))
    assert (fake_judge.call_count, usage.cache_hits) == (3, 3)


def test_request_key_covers_what_shapes_the_answer_and_not_the_label() -> None:
    settings = settings_for("http://judge.test/v1")
    base = request_key(settings, grade("a"))
    assert request_key(settings_for("http://judge.test/v1/"), grade("a")) == base
    assert (
        request_key(settings, ChatRequest(grade("a").messages, SCORE_SCHEMA, name="other")) == base
    )
    changed = [
        request_key(settings_for("http://other.test/v1"), grade("a")),
        request_key(settings_for("http://judge.test/v1", model="judge-2"), grade("a")),
        request_key(settings, grade("b")),
        request_key(settings_for("http://judge.test/v1", max_tokens=10), grade("a")),
        request_key(settings_for("http://judge.test/v1", seed=1), grade("a")),
        request_key(
            settings_for("http://judge.test/v1", response_format="json_object"), grade("a")
        ),
        request_key(settings, grade("a", schema={"type": "object"})),
    ]
    assert len({base, *changed}) == len(changed) + 1


# Budget


def test_budget_stops_new_calls_and_still_serves_cache_hits(fake_judge: FakeJudgeServer) -> None:
    budget = Budget(max_calls=3)
    cache = MemoryCache()
    settings = settings_for(fake_judge.base_url, max_concurrency=2)
    with pytest.raises(BudgetExhausted, match="call budget of 3 spent"):
        run(settings, [grade(f"r{index}") for index in range(6)], cache=cache, budget=budget)
    assert fake_judge.call_count == 3
    assert len(cache) == 3  # the calls that started finished and were kept
    results, _ = run(settings, [grade("r0"), grade("r1"), grade("r2")], cache=cache, budget=budget)
    assert all(result.cached for result in results) and fake_judge.call_count == 3


def test_a_stop_check_ends_new_calls_at_once_and_still_serves_cache_hits(
    fake_judge: FakeJudgeServer,
) -> None:
    """A cancelled job's client stops before its next request: `stop` is asked before each new
    call is sent (here it says stop once two answers are in), never for a cache hit."""
    cache = MemoryCache()
    settings = settings_for(fake_judge.base_url, max_concurrency=1)
    run(settings, [grade("r0")], cache=cache)

    async def complete() -> list[ChatResult]:
        async with JudgeClient(settings, cache, stop=lambda: fake_judge.call_count >= 2) as client:
            return await client.complete_many([grade(f"r{index}") for index in range(5)])

    with pytest.raises(CallsStopped, match="stopped before test-grade"):
        asyncio.run(complete())
    assert fake_judge.call_count == 2 and len(cache) == 2  # r0 from the cache, r1 asked


def test_cost_budget_stops_once_spent() -> None:
    received: list[dict[str, Any]] = []
    transport = mock_transport(received, usage={"prompt_tokens": 1000, "completion_tokens": 0})
    settings = settings_for("http://judge.test/v1", price_in_per_mtok=1000.0, max_concurrency=1)
    budget = Budget(max_cost=2.5)  # each call costs 1.0
    with pytest.raises(BudgetExhausted, match=r"cost budget of 2\.5 spent"):
        run(
            settings, [grade(f"r{index}") for index in range(5)], budget=budget, transport=transport
        )
    assert (len(received), budget.cost_spent) == (3, 3.0)


# Concurrency and accounting


def test_concurrency_limit_bounds_calls_in_flight(fake_judge: FakeJudgeServer) -> None:
    fake_judge.latency_s = 0.05
    results, _ = run(
        settings_for(fake_judge.base_url, max_concurrency=4),
        [grade(f"r{index}") for index in range(20)],
    )
    assert all(result.ok for result in results)
    assert fake_judge.max_in_flight == 4


def test_semaphore_bounds_calls_in_flight_without_a_connection_pool() -> None:
    """MockTransport has no pool, so only the client's semaphore can hold calls back."""
    in_flight, peak = 0, 0

    async def slow_answer(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return httpx.Response(200, json={"choices": [{"message": {"content": '{"score": 1}'}}]})

    settings = settings_for("http://judge.test/v1", max_concurrency=3)
    requests = [grade(f"r{index}") for index in range(12)]
    results, _ = run(settings, requests, transport=httpx.MockTransport(slow_answer))
    assert all(result.ok for result in results)
    assert peak == 3


def test_tokens_and_cost_come_from_usage_and_prices() -> None:
    received: list[dict[str, Any]] = []
    transport = mock_transport(received, usage={"prompt_tokens": 1000, "completion_tokens": 200})
    settings = settings_for("http://judge.test/v1", price_in_per_mtok=2.5, price_out_per_mtok=10.0)
    results, usage = run(settings, [grade("a"), grade("b"), grade("c")], transport=transport)
    assert [result.cost for result in results] == [pytest.approx(0.0045)] * 3
    assert (usage.calls, usage.tokens_in, usage.tokens_out) == (3, 3000, 600)
    assert usage.cost == pytest.approx(0.0135)
    assert usage.latency_s == pytest.approx(sum(result.latency_s for result in results))


def test_fake_server_usage_is_read_from_the_response(fake_judge: FakeJudgeServer) -> None:
    [result], usage = run(settings_for(fake_judge.base_url), [grade("a")])
    prompt = "".join(message["content"] for message in grade("a").messages)
    assert (result.tokens_in, result.tokens_out) == (
        approx_tokens(prompt),
        approx_tokens('{"score": 1.0}'),
    )
    assert usage.as_dict()["tokens_in"] == result.tokens_in


# Authorization and request shape


def test_missing_api_key_variable_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUDGE_TEST_KEY", raising=False)
    with pytest.raises(MissingApiKey, match="JUDGE_TEST_KEY"):
        JudgeClient(
            JudgeSettings(base_url="http://judge.test/v1", model="m", api_key_env="JUDGE_TEST_KEY")
        )


def test_api_key_is_sent_as_bearer_token(
    fake_judge: FakeJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test-123")
    with_key = JudgeSettings(base_url=fake_judge.base_url, model="m", api_key_env="JUDGE_TEST_KEY")
    run(with_key, [grade("a")])
    run(settings_for(fake_judge.base_url), [grade("b")])
    keyed, anonymous = fake_judge.requests
    assert keyed.headers["authorization"] == "Bearer sk-test-123"
    assert "authorization" not in anonymous.headers
    assert keyed.path == "/v1/chat/completions"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (
            "json_schema",
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "judge_output",
                    "schema": {
                        "type": "object",
                        "properties": {"score": {"type": "number", "maximum": 1}},
                        "additionalProperties": False,
                    },
                    "strict": True,
                },
            },
        ),
        ("json_object", {"type": "json_object"}),
        ("none", None),
    ],
)
def test_response_format_payload_shapes(choice: Any, expected: dict[str, Any] | None) -> None:
    received: list[dict[str, Any]] = []
    schema = {
        "type": "object",
        "properties": {"score": {"type": "number", "maximum": 1, "x-clamp": True}},
    }
    settings = settings_for("http://judge.test/v1", response_format=choice, max_tokens=300, seed=7)
    run(settings, [grade("a", schema=schema)], transport=mock_transport(received))
    [body] = received
    assert body.get("response_format") == expected
    assert (body["model"], body["temperature"], body["max_tokens"], body["seed"]) == (
        "judge-test",
        0.0,
        300,
        7,
    )
    assert body["messages"] == list(grade("a").messages)


def test_seed_none_is_left_out_of_the_request() -> None:
    received: list[dict[str, Any]] = []
    run(
        settings_for("http://judge.test/v1", seed=None),
        [grade("a")],
        transport=mock_transport(received),
    )
    assert "seed" not in received[0]


def test_a_request_s_seed_replaces_the_settings_seed_on_the_wire_and_in_the_key() -> None:
    received: list[dict[str, Any]] = []
    settings = settings_for("http://judge.test/v1", seed=7)
    seeded = ChatRequest(grade("a").messages, SCORE_SCHEMA, seed=2)
    run(settings, [seeded, grade("a")], transport=mock_transport(received))
    assert sorted(body["seed"] for body in received) == [2, 7]
    assert request_key(settings, seeded) == request_key(
        settings_for("http://judge.test/v1", seed=2), grade("a")
    )
    assert request_key(settings, seeded) != request_key(settings, grade("a"))


def test_settings_reject_an_unknown_response_format() -> None:
    with pytest.raises(ValueError, match="unknown response_format 'xml'"):
        settings_for("http://judge.test/v1", response_format="xml")


def test_fake_server_records_requests_for_assertions(fake_judge: FakeJudgeServer) -> None:
    run(settings_for(fake_judge.base_url), [grade("a")])
    [received] = fake_judge.requests
    assert isinstance(received, ReceivedRequest)
    assert received.body["model"] == "judge-test"


def test_results_keep_request_order_under_jittered_latency(fake_judge: FakeJudgeServer) -> None:
    def echo_index(body: dict[str, Any]) -> str:
        return json.dumps({"score": int(body["messages"][-1]["content"]) / 100})

    fake_judge.latency_s, fake_judge.jitter_s = 0.02, 0.02
    fake_judge.responder = echo_index
    results, _ = run(
        settings_for(fake_judge.base_url, max_concurrency=8),
        [grade(str(index)) for index in range(24)],
    )
    assert [result.parsed for result in results] == [{"score": index / 100} for index in range(24)]


def test_identical_requests_in_flight_make_one_call(fake_judge: FakeJudgeServer) -> None:
    fake_judge.latency_s = 0.2
    results, usage = run(
        settings_for(fake_judge.base_url), [grade("same")] * 5, cache=MemoryCache()
    )
    assert fake_judge.call_count == 1
    assert (usage.calls, usage.cache_hits) == (1, 4)
    assert {result.parsed["score"] for result in results if result.parsed} == {
        results[0].parsed["score"]
    }
    assert sum(result.cached for result in results) == 4


# What goes on the wire, and how the cache is asked


def test_requests_are_byte_for_byte_what_httpx_asyncclient_post_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client sends straight to the transport; the method, URL, headers (names, values
    and order) and body must equal AsyncClient.post(url, json=payload)'s, so judges and their
    caches see no difference."""
    monkeypatch.setenv("JUDGE_KEY_WIRE", "sk-wire")
    settings = JudgeSettings(
        base_url="http://judge.test/v1/", model="m", api_key_env="JUDGE_KEY_WIRE", seed=7
    )
    request = grade('Süß <<<not a fence>>> \u2028 "quoted"')
    sent: list[httpx.Request] = []

    def answer(wire: httpx.Request) -> httpx.Response:
        sent.append(wire)
        message = {"role": "assistant", "content": '{"score": 1}'}
        return httpx.Response(200, json={"choices": [{"message": message}]})

    results, _ = run(settings, [request], transport=httpx.MockTransport(answer))
    assert results[0].parsed == {"score": 1}

    async def reference() -> httpx.Request:
        async with httpx.AsyncClient(
            headers={"Authorization": "Bearer sk-wire"},
            timeout=httpx.Timeout(settings.timeout_s),
            transport=httpx.MockTransport(answer),
        ) as client:
            await client.post(
                "http://judge.test/v1/chat/completions", json=_payload(settings, request)
            )
        return sent[-1]

    expected = asyncio.run(reference())
    ours = sent[0]
    assert (ours.method, str(ours.url)) == (expected.method, str(expected.url))
    assert ours.headers.raw == expected.headers.raw
    assert ours.content == expected.content
    assert ours.extensions["timeout"] == expected.extensions["timeout"]


async def _wire_bytes(*senders: Any, gzip_answer: bool = False) -> list[bytes]:
    """The bytes each `send(base_url)` puts on the wire, against one server on loopback (so
    the Host header is the same for all), which keeps each request as read, answers it with
    one chat completion (gzip-encoded if asked) and closes the connection."""
    received: list[bytes] = []
    content = json.dumps({"score": 1})
    completion = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    answer = json.dumps(completion).encode()
    extra = ""
    if gzip_answer:
        answer, extra = gzip.compress(answer), "Content-Encoding: gzip\r\n"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        received.append(head + await reader.readexactly(length))
        writer.write(
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(answer)}\r\nConnection: close\r\n\r\n".encode()
            + answer
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    base_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    async with server:
        for send in senders:
            await send(base_url)
    return received


def test_the_direct_path_sends_what_httpx_over_httpx_aiohttp_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default transport's direct path (graders/engine/judge_http.py) skips httpx's
    objects; the bytes on the wire must stay those AsyncClient.post(url, json=payload) sends
    over httpx-aiohttp, request line, headers and body, or judges' caches would miss."""
    from httpx_aiohttp import AiohttpTransport

    monkeypatch.setenv("JUDGE_KEY_WIRE", "sk-wire")
    request = grade('Süß <<<not a fence>>> \u2028 "quoted"')

    def settings_at(base_url: str) -> JudgeSettings:
        return JudgeSettings(base_url=base_url, model="m", api_key_env="JUDGE_KEY_WIRE", seed=7)

    async def ours(base_url: str) -> None:
        async with JudgeClient(settings_at(base_url)) as client:
            assert (await client.complete(request)).parsed == {"score": 1}

    async def reference(base_url: str) -> None:
        async with httpx.AsyncClient(
            headers={"Authorization": "Bearer sk-wire"}, transport=AiohttpTransport()
        ) as client:
            payload = _payload(settings_at(base_url), request)
            await client.post(f"{base_url}/chat/completions", json=payload)

    sent, expected = asyncio.run(_wire_bytes(ours, reference))
    assert sent.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"Bearer sk-wire" in sent and "Süß".encode() in sent
    assert sent == expected


def test_compressed_answers_are_decoded_on_both_paths() -> None:
    """Providers may gzip their answers (the client accepts gzip, as httpx does): the
    client's direct path and an httpx client on the same transport both read the JSON."""
    from graders.engine.judge_http import JudgeTransport, ssl_context

    parsed: list[Any] = []

    async def direct(base_url: str) -> None:
        async with JudgeClient(settings_for(base_url)) as client:
            parsed.append((await client.complete(grade("a"))).parsed)

    async def through_httpx(base_url: str) -> None:
        transport = JudgeTransport(max_connections=1, ssl_context=ssl_context())
        async with httpx.AsyncClient(transport=transport) as client:
            response = await client.post(f"{base_url}/chat/completions", json={})
            parsed.append(json.loads(response.json()["choices"][0]["message"]["content"]))

    asyncio.run(_wire_bytes(direct, through_httpx, gzip_answer=True))
    assert parsed == [{"score": 1}, {"score": 1}]


def test_a_batch_cache_answers_a_group_of_lookups_with_one_get_many(
    fake_judge: FakeJudgeServer,
) -> None:
    class BatchCache(MemoryCache):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[list[str]] = []

        def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
            self.batches.append(list(keys))
            return {key: value for key in keys if (value := self.get(key)) is not None}

    cache = BatchCache()
    settings = settings_for(fake_judge.base_url)
    requests = [grade(f"response {n}") for n in range(6)]
    first, _ = run(settings, requests, cache=cache)
    assert [len(batch) for batch in cache.batches] == [6]
    again, usage = run(settings, requests, cache=cache)
    assert [len(batch) for batch in cache.batches] == [6, 6]
    assert (usage.calls, usage.cache_hits, fake_judge.call_count) == (0, 6, 6)
    assert [r.parsed for r in again] == [r.parsed for r in first]


def test_a_lookup_cancelled_while_it_waits_leaves_the_others_of_its_batch_answered() -> None:
    """Two calls asking for the same key and one for another, in one turn of the loop: the
    first is cancelled before the batch is answered; the others still get their answers."""

    class BatchCache(MemoryCache):
        def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
            return {key: {"text": key} for key in keys}

    async def ask() -> list[Any]:
        async with JudgeClient(settings_for("http://judge.test/v1")) as client:
            cache = BatchCache()
            lookups = [asyncio.ensure_future(client._cache_lookup(cache, key)) for key in "aab"]
            await asyncio.sleep(0)  # every lookup has joined the batch
            lookups[0].cancel()
            return await asyncio.gather(*lookups, return_exceptions=True)

    cancelled, same_key, other_key = asyncio.run(ask())
    assert isinstance(cancelled, asyncio.CancelledError)
    assert (same_key, other_key) == ({"text": "a"}, {"text": "b"})


def test_the_judge_transport_also_serves_httpx_clients(fake_judge: FakeJudgeServer) -> None:
    """JudgeTransport is a whole httpx transport: a plain AsyncClient on it gets the
    judge's answer, status and headers."""
    from graders.engine.judge_http import JudgeTransport, ssl_context

    async def ask() -> httpx.Response:
        transport = JudgeTransport(max_connections=2, ssl_context=ssl_context())
        async with httpx.AsyncClient(transport=transport) as client:
            return await client.post(
                f"{fake_judge.base_url}/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )

    response = asyncio.run(ask())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json()["choices"][0]["message"]["content"] == '{"score": 1.0}'
    assert fake_judge.requests[-1].body["messages"] == [{"role": "user", "content": "hi"}]


def test_a_client_closes_its_own_transport_and_leaves_a_given_one_open(
    fake_judge: FakeJudgeServer,
) -> None:
    """The reward API shares one transport between the clients of many requests, so a
    client must not close a transport it was given; the one it made is its own to close."""
    from graders.engine.judge_http import JudgeTransport, ssl_context

    closed: list[str] = []

    class Recording(JudgeTransport):
        async def aclose(self) -> None:
            closed.append("given")
            await super().aclose()

    async def use() -> None:
        shared = Recording(max_connections=2, ssl_context=ssl_context())
        for _ in range(2):
            async with JudgeClient(settings_for(fake_judge.base_url), transport=shared) as client:
                assert (await client.complete(grade("a"))).error is None
        assert closed == []
        await shared.aclose()
        own = JudgeClient(settings_for(fake_judge.base_url))
        assert isinstance(own._transport, JudgeTransport)
        own_closed: list[bool] = []
        original = own._transport.aclose

        async def recorded() -> None:
            own_closed.append(True)
            await original()

        own._transport.aclose = recorded  # type: ignore[method-assign]
        await own.aclose()
        assert own_closed == [True]

    asyncio.run(use())
    assert closed == ["given"]
