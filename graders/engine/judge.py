"""The judge client: one async client for OpenAI-compatible /chat/completions endpoints.

httpx is the API, but requests go through an aiohttp transport: on a 2-core machine with 64 calls
in flight, httpx's own connection pool reached about 0.13 of the concurrency/latency bound and
aiohttp about 0.85-0.90 (DESIGN.md section 4; bench/judge_throughput.py measures it).

A call never turns a failure into a value: a failed request, an unreadable response and output
that does not match the step's schema all come back as a ChatResult with `error` set. The one
exception a running job must expect is BudgetExhausted, which stops it before it spends more;
MissingApiKey and EgressRefused (at construction) and jsonout.SchemaUnsupported are
configuration bugs.

Deterministic calls (temperature 0) are cached by a hash of everything that shapes the request, so
re-running finished work makes no HTTP calls; cache hits cost nothing and are counted as hits.
"""

import asyncio
import email.utils
import functools
import hashlib
import http
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

import httpx

from graders.engine.breaker import BREAKERS, GATEWAY_DOWN, BreakerOpen, breaker_policy
from graders.engine.egress import EgressPolicy, EgressRefused
from graders.engine.jsonout import OutputInvalid, extract_json_object, validate, wire_schema
from graders.engine.judge_http import HttpReply, JudgeTransport, client_timeout, ssl_context
from graders.engine.slots import PrioritySlots

ResponseFormat = Literal["json_schema", "json_object", "none"]
Message = dict[str, str]

_log = logging.getLogger(__name__)

# A fixed name keeps the request body a function of the cache key's fields alone.
SCHEMA_NAME = "judge_output"
# Network failures worth another attempt; UnsupportedProtocol or a bad proxy URL are not.
_TRANSIENT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
# Timeouts after the connection was made (graders/engine/breaker.py: slow is not dead). A
# connect timeout reaches us as ConnectTimeout, or as a plain TimeoutException from aiohttp.
_SLOW_ERRORS = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout)
_QUOTA_WORDS = ("quota", "billing")
# How refusals read at OpenAI, vLLM and llama.cpp, to pick the fixed reason shown for them.
_CONTEXT_WORDS = ("context length", "context_length", "maximum context", "context size")
_SCHEMA_WORDS = ("response_format", "json_schema", "schema")


class BudgetExhausted(Exception):
    """The job's call or cost budget is spent; no new request was sent."""


class CallsStopped(Exception):
    """The client's `stop` check said to stop (its job was cancelled); no new request was sent."""


class MissingApiKey(RuntimeError):
    """The environment variable that should hold the judge's API key is not set."""


class _CallFailed(Exception):
    """A call ended without a usable completion; the message becomes ChatResult.error."""


class _Refused(_CallFailed):
    """The endpoint's breaker is open: the call stops before sending (another) request."""


@dataclass(frozen=True)
class JudgeSettings:
    """Where and how to call the judge. Holds the name of the key's environment variable,
    never the key, so settings can be stored, logged and sent to workers."""

    base_url: str
    model: str
    api_key_env: str | None
    temperature: float = 0.0
    max_tokens: int = 1024
    max_concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 5
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    seed: int | None = 0
    response_format: ResponseFormat = "json_schema"
    # The endpoint's circuit breaker (graders/engine/breaker.py): open after this many
    # consecutive connection failures, for this many seconds; None: JUDGE_BREAKER_FAILURES
    # and JUDGE_BREAKER_COOLDOWN_S from the environment, else 5 and 15 s. 0 failures: off.
    breaker_failures: int | None = None
    breaker_cooldown_s: float | None = None
    # Where the client may connect and send the key (graders/engine/egress.py); None checks
    # nothing, for a training job whose operator set the judge. Never read from a bundle.
    egress: EgressPolicy | None = None

    def __post_init__(self) -> None:
        # Settings often arrive from JSON or a form, where the Literal type is not enforced.
        if self.response_format not in ("json_schema", "json_object", "none"):
            raise ValueError(f"unknown response_format {self.response_format!r}")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        breaker_policy(self.breaker_failures, self.breaker_cooldown_s, environ={})  # checked


@dataclass(frozen=True)
class ChatRequest:
    """One judge call. `schema` describes the JSON object expected back (see jsonout);
    None means free text, returned unparsed. `name` labels the call in logs and traces."""

    messages: tuple[Message, ...]
    schema: dict[str, Any] | None = None
    name: str = "judge"
    # The sampling seed of this call, in place of the settings' seed: a new seed asks for a new
    # sample and makes a new cache key (a synthesis retry's fresh rollout, an evaluator sweep's
    # run index). None: the settings'.
    seed: int | None = None


@dataclass
class ChatResult:
    """What one call produced. `parsed` is set only when the output matched the schema;
    otherwise `error` says why and `text` keeps whatever the judge wrote. Tokens, latency and
    cost describe this call's spending, so all are zero for a cache hit."""

    text: str | None
    parsed: dict[str, Any] | None
    error: str | None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    cost: float = 0.0
    cached: bool = False
    request_key: str = ""
    # The call ended on the endpoint's open circuit breaker, sending no (further) request;
    # `error` says why and until when.
    refused: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class JudgeCache(Protocol):
    """Stores completions by request key. Values are small JSON-safe dicts."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any]) -> None: ...


class BatchJudgeCache(JudgeCache, Protocol):
    """A cache that can also answer many keys at once (one database query, say). The client
    batches the lookups its calls make in one turn of the event loop into one get_many."""

    def get_many(self, keys: Sequence[str]) -> Mapping[str, dict[str, Any]]: ...


class MemoryCache:
    """A cache for one process: tests, benchmarks, a single search run."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._entries.get(key)

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._entries[key] = value


class JsonlFileCache(MemoryCache):
    """A cache in an append-only JSON Lines file, for training jobs with no database.

    The file is read once at construction; each put appends one line and closes the file, so a
    job killed mid-run keeps everything it paid for. A torn last line from such a kill is
    skipped on the next load, and a later line for the same key wins.
    """

    def __init__(self, path: Path | str) -> None:
        super().__init__()
        self.path = Path(path)
        if self.path.exists():
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def _load(self) -> None:
        line = "\n"
        # errors="replace": a kill can also cut a multi-byte character; that line is skipped.
        with self.path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                try:
                    entry = json.loads(line)
                    super().put(entry["key"], entry["value"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
        if not line.endswith("\n"):
            # End the torn line, or the next entry would be appended to it and lost with it.
            with self.path.open("a", encoding="utf-8") as out:
                out.write("\n")

    def put(self, key: str, value: dict[str, Any]) -> None:
        super().put(key, value)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"key": key, "value": value}, ensure_ascii=False) + "\n")


@dataclass
class Usage:
    """Spending rolled up over a client's life. `calls` counts HTTP responses received (retried
    ones included); `failures` counts results returned with an error. Updated only from the
    event loop between awaits, so no lock is needed."""

    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    latency_s: float = 0.0

    def add(self, result: ChatResult) -> None:
        self.cache_hits += result.cached
        self.failures += not result.ok
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        self.cost += result.cost
        self.latency_s += result.latency_s

    def as_dict(self) -> dict[str, int | float]:
        return asdict(self)


@dataclass
class Budget:
    """A job's spending limit; share one instance across the job's clients.

    A call is claimed just before its first request is sent, so at most `max_calls` calls ever
    start (a call's retries belong to it). Cost is known only when a call ends, so up to
    `max_concurrency` calls already in flight may finish past `max_cost`.
    """

    max_calls: int | None = None
    max_cost: float | None = None
    calls_claimed: int = 0
    cost_spent: float = 0.0

    def claim(self) -> None:
        if self.max_calls is not None and self.calls_claimed >= self.max_calls:
            raise BudgetExhausted(f"call budget of {self.max_calls} spent")
        if self.max_cost is not None and self.cost_spent >= self.max_cost:
            raise BudgetExhausted(f"cost budget of {self.max_cost} spent ({self.cost_spent:.4f})")
        self.calls_claimed += 1

    def spend(self, cost: float) -> None:
        self.cost_spent += cost


class JudgeClient:
    """Calls the judge with at most `settings.max_concurrency` requests in flight.

    Use a client within one event loop (its semaphore and connections belong to that loop).
    `transport` replaces the aiohttp transport (e.g. httpx.MockTransport in unit tests); it
    stays the caller's, open after the client closes, so several clients may share one.
    `backoff_base_s` and `backoff_cap_s` shape the retry waits: exponential with full jitter.
    A Retry-After header replaces the jittered wait, up to the cap, so a misbehaving server
    cannot park a job for an hour. `stop`, if given, is asked before each new request is sent
    (never for a cache hit); when it answers True the call raises CallsStopped, so a cancelled
    job stops calling the judge at once while the calls already in flight finish and are cached.

    With `settings.egress`, the base URL and key variable are checked (EgressRefused) before
    the key is read, and connections go to allowed addresses only; a transport passed in must
    then enforce the same policy.

    Every attempt goes through the endpoint's circuit breaker (graders/engine/breaker.py),
    shared by the process's clients, so no request is sent while it is open. With
    `fail_fast` (a trainer's Grader, the reward API: an answer now beats a late one), a call
    then fails at once with the reason, and a call whose failure opened it stops retrying.
    Without it (grading jobs, searches: a judge that restarts within the retries should not
    fail a run), a refused attempt waits out the cool-down, capped like any back-off, and
    counts as a retry.
    """

    def __init__(
        self,
        settings: JudgeSettings,
        cache: JudgeCache | None = None,
        budget: Budget | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        stop: Callable[[], bool] | None = None,
        fail_fast: bool = False,
    ) -> None:
        if settings.egress is not None:
            settings.egress.check(settings.base_url, settings.api_key_env)
            if transport is not None and getattr(transport, "egress", None) != settings.egress:
                raise ValueError("the transport does not enforce the settings' egress policy")
        self.settings = settings
        self.usage = Usage()
        self._cache = cache
        self._budget = budget
        self._stop = stop
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._fail_fast = fail_fast
        # Raises ValueError for a bad setting or variable, before any work.
        policy = breaker_policy(settings.breaker_failures, settings.breaker_cooldown_s)
        self._breaker = BREAKERS.get(settings.base_url, policy)
        # Waiting calls go in by graders.engine.slots.call_priority, then in arrival order.
        self._semaphore = PrioritySlots(settings.max_concurrency)
        self._in_flight: dict[str, asyncio.Future[None]] = {}
        # Lookups waiting for the next batched get_many (see _cache_lookup).
        self._lookups: dict[str, list[asyncio.Future[dict[str, Any] | None]]] = {}
        # An absolute URL built once: httpx re-parses a relative one against base_url per call.
        self._url = httpx.URL(settings.base_url.rstrip("/") + "/chat/completions")
        self._url_text = str(self._url)
        # A transport passed in is the caller's, who may share it between clients.
        self._owns_transport = transport is None
        self._transport = transport or JudgeTransport(
            max_connections=settings.max_concurrency,
            ssl_context=ssl_context(),
            egress=settings.egress,
        )
        # What AsyncClient.post would send, worked out once: its headers (httpx's defaults and
        # the key) and timeouts. Requests go straight to the transport (see _post): the
        # client's per-call cookie, auth and redirect handling cost more CPU than the rest of
        # a call, and a judge API needs none of them.
        authorization = _authorization(settings.api_key_env)
        self._headers = _client_headers(authorization)
        self._headers_around = _post_headers(self._url_text, authorization)
        self._timeout = httpx.Timeout(settings.timeout_s).as_dict()
        self._client_timeout = client_timeout(self._timeout)

    async def __aenter__(self) -> "JudgeClient":
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_transport:
            await self._transport.aclose()

    async def complete(self, request: ChatRequest) -> ChatResult:
        """Answer from the cache when the call is deterministic, else call the judge.

        Raises BudgetExhausted, before sending anything, when the budget is spent.
        """
        key = request_key(self.settings, request)
        cache = self._cache if self.settings.temperature == 0 else None
        stored = await self._cache_lookup(cache, key) if cache is not None else None
        if stored is not None and _is_stored_completion(stored):
            result = _cached_result(stored, request)
        else:
            result = await self._call_once(request, key, cache)
        result.request_key = key
        self.usage.add(result)
        if result.error is not None:
            # Refusals are many and alike; the breaker logs its opening and closing instead.
            _log.log(
                logging.DEBUG if result.refused else logging.WARNING,
                "judge call %s failed: %s",
                request.name,
                result.error,
            )
        return result

    async def _cache_lookup(self, cache: JudgeCache, key: str) -> dict[str, Any] | None:
        """cache.get(key); with a batch cache, the lookups of every call that starts in the same
        turn of the event loop (a group's responses, gathered) are one get_many."""
        get_many = getattr(cache, "get_many", None)
        if get_many is None:
            return cache.get(key)
        loop = asyncio.get_running_loop()
        if not self._lookups:
            loop.call_soon(self._lookups_answer, get_many)
        # A future per caller, not per key: a caller cancelled while it waits takes only its
        # own future with it (a shared one would need asyncio.shield, a task per lookup).
        answer: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        self._lookups.setdefault(key, []).append(answer)
        return await answer

    def _lookups_answer(
        self, get_many: Callable[[Sequence[str]], Mapping[str, dict[str, Any]]]
    ) -> None:
        lookups, self._lookups = self._lookups, {}
        try:
            found = get_many(list(lookups))
        except BaseException as exc:
            for futures in lookups.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
            return
        for key, futures in lookups.items():
            for future in futures:
                if not future.done():  # its caller was cancelled meanwhile
                    future.set_result(found.get(key))

    async def _call_once(
        self, request: ChatRequest, key: str, cache: JudgeCache | None
    ) -> ChatResult:
        """Identical deterministic requests in flight at the same moment (the same requirement
        step for every ordered pair, say) make one HTTP call; the others wait for it and read
        its answer from the cache."""
        if cache is None:
            return await self._call(request, key, cache)
        pending = self._in_flight.get(key)
        if pending is not None:
            await asyncio.shield(pending)
            stored = cache.get(key)
            if stored is not None and _is_stored_completion(stored):
                return _cached_result(stored, request)
            return await self._call(request, key, cache)  # the first one failed: try ourselves
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = done
        try:
            return await self._call(request, key, cache)
        finally:
            del self._in_flight[key]
            done.set_result(None)

    async def complete_many(self, requests: Iterable[ChatRequest]) -> list[ChatResult]:
        """Complete all requests concurrently; results keep the order of `requests`.

        If the budget runs out, the calls already in flight finish (and are cached) before
        BudgetExhausted is raised, so a resumed job does not pay for them twice.
        """
        outcomes = await asyncio.gather(
            *(self.complete(request) for request in requests), return_exceptions=True
        )
        results: list[ChatResult] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            results.append(outcome)
        return results

    async def _call(self, request: ChatRequest, key: str, cache: JudgeCache | None) -> ChatResult:
        async with self._semaphore:
            if self._stop is not None and self._stop():
                raise CallsStopped(f"stopped before {request.name}")
            if self._budget is not None:
                self._budget.claim()
            started = time.perf_counter()
            try:
                body = _body_encode(_payload(self.settings, request))
                response = await self._post_with_retries(body, request.name)
                text, tokens_in, tokens_out = _read_completion(response)
            except _CallFailed as failure:
                return ChatResult(
                    None,
                    None,
                    str(failure),
                    latency_s=time.perf_counter() - started,
                    refused=isinstance(failure, _Refused),
                )
            latency_s = time.perf_counter() - started
        cost = (
            tokens_in * self.settings.price_in_per_mtok
            + tokens_out * self.settings.price_out_per_mtok
        ) / 1_000_000
        if self._budget is not None:
            self._budget.spend(cost)
        if cache is not None:
            # Output that fails the schema is stored too: at temperature 0, asking again would
            # pay for the same answer. Failed requests are not stored; they may succeed later.
            stored = {"text": text, "tokens_in": tokens_in, "tokens_out": tokens_out, "cost": cost}
            cache.put(key, stored)
        result = _interpret(text, request.schema)
        result.tokens_in, result.tokens_out, result.cost = tokens_in, tokens_out, cost
        result.latency_s = latency_s
        return result

    async def _post(self, body: bytes) -> HttpReply:
        """What AsyncClient.post(url, json=payload) over httpx-aiohttp sends, byte for byte (the
        same headers in the same order, the same body), without the client's per-call work;
        through JudgeTransport.post when the transport is one (graders/engine/judge_http.py)."""
        if isinstance(self._transport, JudgeTransport):
            before, after = self._headers_around
            headers = [*before, ("content-length", str(len(body))), *after]
            return await self._transport.post(self._url_text, headers, body, self._client_timeout)
        request = httpx.Request(
            "POST", self._url, headers=self._headers, content=body,
            extensions={"timeout": self._timeout},
        )  # fmt: skip
        request.headers["Content-Type"] = "application/json"
        response = await self._transport.handle_async_request(request)
        response.request = request
        try:
            await response.aread()
        except BaseException:
            await response.aclose()
            raise
        return response

    async def _post_with_retries(self, body: bytes, name: str) -> HttpReply:
        """POST until a 200, a failure not worth retrying, or max_retries retries."""
        retries = 0
        while True:
            wait: float | None = None
            try:
                response = await self._attempt(body)
            except BreakerOpen as exc:
                if self._fail_fast:
                    raise _Refused(str(exc)) from None
                # A job waits out the cool-down (capped), a retry like any other.
                problem, wait = str(exc), exc.retry_in_s or None
            except EgressRefused as exc:  # the host resolved to an address it may not use
                raise _CallFailed(str(exc)) from None
            except _TRANSIENT_ERRORS as exc:
                problem = _network_problem(exc)
            else:
                self.usage.calls += 1
                if response.status_code == 200:
                    return response
                problem = _http_problem(response)
                if not _is_retryable(response):
                    raise _CallFailed(problem)
                wait = retry_after_seconds(response.headers.get("retry-after"))
            if retries >= self.settings.max_retries:
                raise _CallFailed(f"gave up after {retries + 1} attempts; last: {problem}")
            if self._fail_fast:
                try:
                    self._breaker.check()  # open now (this failure, or others meanwhile): stop
                except BreakerOpen as exc:
                    raise _Refused(str(exc)) from None
            retries += 1
            self.usage.retries += 1
            delay = min(wait, self._backoff_cap_s) if wait is not None else self._backoff(retries)
            _log.info("judge call %s: %s; retry %d in %.2fs", name, problem, retries, delay)
            await asyncio.sleep(delay)

    async def _attempt(self, body: bytes) -> HttpReply:
        """One POST, let through by the endpoint's breaker (BreakerOpen if not), and its
        outcome told to the breaker: no answer or a gateway's "down" counts against the
        endpoint, any other answer for it, a timeout after connecting neither."""
        probe = self._breaker.admit()
        try:
            response = await self._post(body)
        except _SLOW_ERRORS:
            self._breaker.inconclusive(probe)
            raise
        except _TRANSIENT_ERRORS as exc:
            self._breaker.failure(_network_problem(exc), probe)
            raise
        except BaseException:
            self._breaker.inconclusive(probe)
            raise
        if response.status_code in GATEWAY_DOWN:
            self._breaker.failure(f"HTTP {response.status_code}: {_http_reason(response)}", probe)
        else:
            self._breaker.success()
        return response

    def _backoff(self, retry: int) -> float:
        """Full jitter: spreads out clients that failed together so they do not retry together."""
        return random.uniform(0, min(self._backoff_cap_s, self._backoff_base_s * 2 ** (retry - 1)))


def request_key(settings: JudgeSettings, request: ChatRequest) -> str:
    """sha256 over a canonical JSON of everything that shapes the judge's answer."""
    material = {
        "base_url": settings.base_url.rstrip("/"),
        "model": settings.model,
        "messages": list(request.messages),
        "temperature": float(settings.temperature),
        "max_tokens": settings.max_tokens,
        "response_format": settings.response_format,
        "schema": request.schema,
        "seed": _seed(settings, request),
    }
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _seed(settings: JudgeSettings, request: ChatRequest) -> int | None:
    return settings.seed if request.seed is None else request.seed


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait per a Retry-After header (delay-seconds or an HTTP date), or None."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _authorization(api_key_env: str | None) -> str | None:
    if api_key_env is None:
        return None
    key = os.environ.get(api_key_env)
    if not key:
        raise MissingApiKey(f"the judge API key variable {api_key_env} is not set or is empty")
    return f"Bearer {key}"


@functools.cache
def _client_headers(authorization: str | None) -> tuple[tuple[bytes, bytes], ...]:
    """httpx.AsyncClient's default headers, and the key's, in the order it sends them; worked
    out once per key, as building a client costs about 0.2 ms of CPU."""
    with httpx.Client(headers={"Authorization": authorization} if authorization else {}) as client:
        return tuple(client.headers.raw)


@functools.lru_cache(maxsize=64)
def _post_headers(
    url: str, authorization: str | None
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """The headers of a POST of JSON to `url`, as httpx-aiohttp hands them to aiohttp: those
    before the Content-Length and those after it (each call puts its own length between)."""
    template = httpx.Request("POST", url, headers=_client_headers(authorization), content=b"{}")
    template.headers["Content-Type"] = "application/json"
    pairs = list(template.headers.items())
    at = [name for name, _ in pairs].index("content-length")
    return tuple(pairs[:at]), tuple(pairs[at + 1 :])


def _payload(settings: JudgeSettings, request: ChatRequest) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": settings.model,
        "messages": list(request.messages),
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
    }
    seed = _seed(settings, request)
    if seed is not None:
        payload["seed"] = seed
    response_format = _response_format(settings.response_format, request.schema)
    if response_format is not None:
        payload["response_format"] = response_format
    return payload


def _body_encode(payload: dict[str, Any]) -> bytes:
    # Exactly httpx's encoding of json= (httpx._content.encode_json), so the bytes on the wire
    # are what AsyncClient.post(json=payload) sent.
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _response_format(
    choice: ResponseFormat, schema: dict[str, Any] | None
) -> dict[str, Any] | None:
    """How to ask for JSON; free-text requests (no schema) ask for nothing."""
    if schema is None or choice == "none":
        return None
    if choice == "json_object":
        return {"type": "json_object"}
    return {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "schema": _wire_schema(schema), "strict": True},
    }


# Steps send the same schema object with every call (programs.Step caches it), so its wire form
# is kept by identity; the entry holds the schema itself, so its id cannot be reused meanwhile.
_WIRE_SCHEMAS: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
_WIRE_SCHEMAS_MAX = 512


def _wire_schema(schema: dict[str, Any]) -> dict[str, Any]:
    entry = _WIRE_SCHEMAS.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    wire = wire_schema(schema)
    if len(_WIRE_SCHEMAS) >= _WIRE_SCHEMAS_MAX:
        _WIRE_SCHEMAS.clear()
    _WIRE_SCHEMAS[id(schema)] = (schema, wire)
    return wire


def _error_body(response: HttpReply) -> dict[str, Any]:
    """The OpenAI-style {"error": {...}} object, or {} when the body has none."""
    try:
        body = response.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _http_problem(response: HttpReply) -> str:
    """The status and a fixed reason for it, never the server's words: a judge URL can point
    at a service whose answers (its body, even its reason phrase) must not be read back
    through grade errors, traces or reward answers. The body goes to the debug log."""
    _log.debug("judge answered HTTP %d: %.500r", response.status_code, response.text)
    return f"HTTP {response.status_code}: {_http_reason(response)}"


def _http_reason(response: HttpReply) -> str:
    status = response.status_code
    if status == 429:
        return "rate limited" if _is_retryable(response) else "out of quota or credit"
    if status in (400, 404, 413, 422):
        error = _error_body(response)
        said = f"{error.get('code')} {error.get('type')} {error.get('message')}".lower()
        if any(word in said for word in _CONTEXT_WORDS):
            return "context too long"
        if status == 404 and "model" in said:
            return "model not found"
        if status == 400 and any(word in said for word in _SCHEMA_WORDS):
            return "response format or schema refused (try another response format)"
    try:
        return http.HTTPStatus(status).phrase.lower()
    except ValueError:
        return "unexpected status"


def _network_problem(exc: Exception) -> str:
    """The failure's type and a fixed description: an exception's message can quote what the
    server sent."""
    for kind, description in _NETWORK_PROBLEMS:
        if isinstance(exc, kind):
            return f"{type(exc).__name__}: {description}"
    return type(exc).__name__


_NETWORK_PROBLEMS: tuple[tuple[type[Exception], str], ...] = (
    (httpx.TimeoutException, "timed out"),
    (httpx.ConnectError, "could not connect"),
    (httpx.RemoteProtocolError, "the answer is not valid HTTP"),
    (httpx.NetworkError, "the connection failed"),
)


def _is_retryable(response: HttpReply) -> bool:
    """429 and 5xx are transient, except a 429 saying the account is out of quota or credit,
    which no amount of waiting fixes.

    A structured code decides first: OpenAI's plain rate-limit messages have linked to the
    billing page, so the words only decide when the provider sends no code.
    """
    if response.status_code >= 500:
        return True
    if response.status_code != 429:
        return False
    error = _error_body(response)
    if "insufficient_quota" in (error.get("code"), error.get("type")):
        return False
    if error.get("code") == "rate_limit_exceeded":
        return True
    message = str(error.get("message", "")).lower()
    return not any(word in message for word in _QUOTA_WORDS)


def _read_completion(response: HttpReply) -> tuple[str | None, int, int]:
    """Content and token counts of a chat completion; raises _CallFailed if it is not one."""
    try:
        body = response.json()
        content = body["choices"][0]["message"]["content"]
        usage = body.get("usage") or {}
        tokens_in = int(usage.get("prompt_tokens") or 0)
        tokens_out = int(usage.get("completion_tokens") or 0)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        # The exception's own message can quote the body; its type says enough.
        raise _CallFailed(
            f"invalid judge response: {type(exc).__name__} (not a chat completion)"
        ) from None
    if content is not None and not isinstance(content, str):
        raise _CallFailed(f"invalid judge response: content is {type(content).__name__}")
    return content, tokens_in, tokens_out


def _cached_result(stored: dict[str, Any], request: ChatRequest) -> ChatResult:
    result = _interpret(stored["text"], request.schema)
    result.cached = True
    return result


def _is_stored_completion(value: dict[str, Any]) -> bool:
    """Whether a cache value holds a completion; anything else is treated as a miss."""
    return "text" in value and isinstance(value["text"], str | None)


def _interpret(text: str | None, schema: dict[str, Any] | None) -> ChatResult:
    """Turn the judge's text into a result: parsed and valid, or an error keeping the text."""
    if text is None:
        return ChatResult(None, None, "judge returned no content")
    if schema is None:
        return ChatResult(text, None, None)
    obj = extract_json_object(text)
    if obj is None:
        return ChatResult(text, None, "unparseable judge output: no JSON object found")
    try:
        return ChatResult(text, validate(obj, schema), None)
    except OutputInvalid as exc:
        return ChatResult(text, None, f"unparseable judge output: {exc}")
