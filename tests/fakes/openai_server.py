"""A fake OpenAI-compatible judge: a real HTTP server on 127.0.0.1 for tests and benchmarks.

It serves HTTP/1.1 with keep-alive from an asyncio protocol on its own event loop in a background
thread, so one thread holds many requests open at once (the throughput bench keeps 64 in flight).
A bare protocol rather than aiohttp.web because in the bench it shares the interpreter lock with
the client it measures, so every microsecond counts (about 70 us per request here against 95 for
aiohttp.web), and because a scripted fault can then cut a body short exactly. It reads request
bodies by Content-Length only, which every client we use sends.

Tests script it:

- `latency_s` / `jitter_s`: how long each request takes (jitter is uniform, +/-), or `latency`,
  a function from the parsed request body to its seconds (heavy_tail_latency: a long-tailed one,
  the same for the same request, so a benchmark can work out its own bound);
- `script(*faults)`: the next requests fail in the given ways, one fault per request, in order;
- `responder`: a function from the parsed request body to the assistant's content string, so a
  score can depend on what the prompt contains;
- `hold()` / `release()`: requests arriving meanwhile wait unread (not counted, recorded or
  answered) until the release; one whose client goes away meanwhile (a killed worker) is dropped
  unseen, so a test can kill a client with nothing it asked half-answered (`held` counts them).

It records every request it receives (`requests`, `any_prompt_contains`) and the largest number
it was serving at once (`max_in_flight`).
"""

import asyncio
import hashlib
import itertools
import json
import math
import random
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType
from typing import Any, Literal

import pytest

Responder = Callable[[dict[str, Any]], str]
Latency = Callable[[dict[str, Any]], float]
FaultKind = Literal[
    "rate_limited",  # 429, with Retry-After when the fault gives one
    "insufficient_quota",  # 429 that no retry fixes
    "bad_request",  # 400
    "server_error",  # 500
    "unavailable",  # 503
    "hang",  # no answer for `hang_s`, longer than any client timeout in the tests
    "truncated_body",  # 200 whose body stops halfway, then the connection closes
    "malformed_json",  # 200 whose content is JSON cut off mid-object (finish_reason "length")
    "non_json",  # 200 whose content is prose
]
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MALFORMED_CONTENT = '{"score": 0.9, "reason": "The answer cites the'
NON_JSON_CONTENT = "The response is thorough and accurate. I would rate it highly."
_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "rate_limited": (
        429,
        {
            "message": "Rate limit reached for requests per min. Please try again shortly.",
            "type": "requests",
            "code": "rate_limit_exceeded",
        },
    ),
    "insufficient_quota": (
        429,
        {
            "message": "You exceeded your current quota, please check your plan and billing details.",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        },
    ),
    "bad_request": (
        400,
        {
            "message": "Invalid schema for response_format 'judge_output'.",
            "type": "invalid_request_error",
        },
    ),
    "server_error": (
        500,
        {
            "message": "The server had an error while processing your request.",
            "type": "server_error",
        },
    ),
    "unavailable": (
        503,
        {
            "message": "The engine is currently overloaded, please try again later.",
            "type": "server_error",
        },
    ),
}


@dataclass(frozen=True)
class Fault:
    """One scripted failure; `retry_after` is the Retry-After header sent with a 429."""

    kind: FaultKind
    retry_after: str | None = None


@dataclass(frozen=True)
class ReceivedRequest:
    """A request as the server saw it; header names are lower-cased."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    truncate: bool = False


def approx_tokens(text: str) -> int:
    """The fake's token count: about four characters a token, as for English with GPT tokenizers."""
    return max(1, len(text) // 4)


def constant_responder(content: str) -> Responder:
    """A responder that always answers `content`."""
    return lambda body: content


DEFAULT_RESPONDER = constant_responder('{"score": 1.0}')


def heavy_tail_latency(
    *,
    median_s: float = 0.75,
    tail_s: float = 100.0,
    tail_share: float = 0.01,
    sigma: float = 0.5,
    scale: float = 1.0,
) -> Latency:
    """Latencies as a hosted model shows them: a `tail_share` of calls take `tail_s`, the rest
    are log-normal around `median_s` (log-sd `sigma`); every value times `scale`. The draw is a
    hash of the request's model, messages and seed, so a request takes the same time on every
    run and a client that knows the request knows it too (request_latency)."""
    normal = statistics.NormalDist()

    def latency(body: dict[str, Any]) -> float:
        material = json.dumps(
            [body.get("model"), body.get("messages"), body.get("seed")], sort_keys=True
        )
        digest = hashlib.sha256(material.encode()).digest()
        u = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64
        if u < tail_share:
            return tail_s * scale
        spread = normal.inv_cdf((u - tail_share) / (1 - tail_share))
        return median_s * math.exp(sigma * spread) * scale

    return latency


class FakeJudgeServer:
    """See the module docstring. Use as a context manager, or call start() and stop()."""

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        jitter_s: float = 0.0,
        responder: Responder = DEFAULT_RESPONDER,
        hang_s: float = 30.0,
        keep_requests: bool = True,
        latency: Latency | None = None,
    ) -> None:
        self.latency_s = latency_s
        self.latency = latency
        # Benchmarks turn this off: ten thousand stored bodies make the collector's full
        # passes long enough to show up as the judge's latency.
        self.keep_requests = keep_requests
        self._calls = 0
        self.jitter_s = jitter_s
        self.responder = responder
        self.hang_s = hang_s
        self.requests: list[ReceivedRequest] = []
        self.max_in_flight = 0
        self.base_url = ""
        self.host_port = ""
        self._in_flight = 0
        self._held = 0
        self._open: asyncio.Event | None = None
        self._faults: deque[Fault] = deque()
        self._ids = itertools.count(1)
        # Tests read and script from their own thread while the server thread serves.
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fake-judge", daemon=True
        )
        self._server: asyncio.Server | None = None

    def __enter__(self) -> "FakeJudgeServer":
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def call_count(self) -> int:
        with self._lock:
            return self._calls

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered."""
        with self._lock:
            return self._in_flight

    @property
    def held(self) -> int:
        """Requests waiting unread for release()."""
        with self._lock:
            return self._held

    def hold(self) -> None:
        """From now on, keep each arriving request unread until release()."""
        self._on_loop(lambda: self._gate().clear())

    def release(self) -> None:
        self._on_loop(lambda: self._gate().set())

    def _gate(self) -> asyncio.Event:
        assert self._open is not None, "start the server first"
        return self._open

    def _on_loop(self, function: Callable[[], None]) -> None:
        async def run() -> None:
            function()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def script(self, *faults: Fault) -> None:
        """Make the next len(faults) requests fail, in this order."""
        with self._lock:
            self._faults.extend(faults)

    def any_prompt_contains(self, text: str) -> bool:
        """Whether `text` appeared in any message of any request received."""
        with self._lock:
            bodies = [received.body for received in self.requests]
        return any(
            text in str(message.get("content", ""))
            for body in bodies
            for message in body.get("messages", [])
        )

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await self._loop.create_server(lambda: _Connection(self), "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.host_port = f"{host}:{port}"
        self.base_url = f"http://{self.host_port}/v1"

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for connection in list(self._connections):
            connection.close()
        await self._server.wait_closed()

    async def _reply(self, path: str, headers: dict[str, str], raw_body: bytes) -> _Reply:
        gate = self._gate()
        if not gate.is_set():
            with self._lock:
                self._held += 1
            try:
                await gate.wait()
            finally:
                with self._lock:
                    self._held -= 1
        if path not in CHAT_PATHS:
            return _error_reply(
                404, {"message": f"no route {path}", "type": "invalid_request_error"}
            )
        try:
            body = json.loads(raw_body)
        except json.JSONDecodeError:
            return _error_reply(
                400, {"message": "body is not JSON", "type": "invalid_request_error"}
            )
        with self._lock:
            self._calls += 1
            if self.keep_requests:
                self.requests.append(ReceivedRequest(path, headers, body))
            fault = self._faults.popleft() if self._faults else None
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            await asyncio.sleep(self._delay(body))
            return await self._scripted_reply(body, fault)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _delay(self, body: dict[str, Any]) -> float:
        if self.latency is not None:
            return self.latency(body)
        if not self.jitter_s:
            return self.latency_s
        return max(0.0, self.latency_s + random.uniform(-self.jitter_s, self.jitter_s))

    async def _scripted_reply(self, body: dict[str, Any], fault: Fault | None) -> _Reply:
        if fault is None:
            return self._completion(body, self.responder(body), "stop")
        if fault.kind in _ERRORS:
            status, error = _ERRORS[fault.kind]
            retry_after = fault.retry_after
            return _error_reply(
                status, error, (("Retry-After", retry_after),) if retry_after else ()
            )
        if fault.kind == "hang":
            await asyncio.sleep(self.hang_s)
            return self._completion(body, self.responder(body), "stop")
        if fault.kind == "truncated_body":
            complete = self._completion(body, self.responder(body), "stop")
            return _Reply(200, complete.body, truncate=True)
        if fault.kind == "malformed_json":
            return self._completion(body, MALFORMED_CONTENT, "length")
        return self._completion(body, NON_JSON_CONTENT, "stop")

    def _completion(self, body: dict[str, Any], content: str, finish_reason: str) -> _Reply:
        prompt = "".join(str(message.get("content", "")) for message in body.get("messages", []))
        prompt_tokens, completion_tokens = approx_tokens(prompt), approx_tokens(content)
        completion = {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-judge"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "system_fingerprint": "fp_fake",
        }
        return _Reply(200, json.dumps(completion).encode())


class _Connection(asyncio.Protocol):
    """One client connection: requests are answered one at a time, in order (HTTP/1.1)."""

    def __init__(self, server: FakeJudgeServer) -> None:
        self._server = server
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        # A client that gave up (a "hang" past its timeout) takes its pending reply with it.
        self._server._connections.discard(self)
        if self._task is not None:
            self._task.cancel()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._serve_buffered())

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def _serve_buffered(self) -> None:
        while (request := self._take_request()) is not None:
            path, headers, body = request
            reply = await self._server._reply(path, headers, body)
            self._write(reply, keep_alive=headers.get("connection", "").lower() != "close")

    def _take_request(self) -> tuple[str, dict[str, str], bytes] | None:
        """Remove one complete request from the buffer, or return None if none is complete."""
        head_end = self._buffer.find(b"\r\n\r\n")
        if head_end < 0:
            return None
        request_line, *header_lines = self._buffer[:head_end].decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body_start = head_end + 4
        body_end = body_start + int(headers.get("content-length", "0"))
        if len(self._buffer) < body_end:
            return None
        body = bytes(self._buffer[body_start:body_end])
        del self._buffer[:body_end]
        path = request_line.split(" ")[1] if request_line.count(" ") >= 2 else ""
        return path, headers, body

    def _write(self, reply: _Reply, *, keep_alive: bool) -> None:
        assert self._transport is not None
        lines = [
            f"HTTP/1.1 {reply.status} {HTTPStatus(reply.status).phrase}",
            "Content-Type: application/json",
            f"Content-Length: {len(reply.body)}",
            *(f"{name}: {value}" for name, value in reply.headers),
        ]
        if not keep_alive:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        body = reply.body[: len(reply.body) // 2] if reply.truncate else reply.body
        self._transport.write(head + body)
        if reply.truncate or not keep_alive:
            self._transport.close()


def _error_reply(
    status: int, error: dict[str, Any], headers: tuple[tuple[str, str], ...] = ()
) -> _Reply:
    body = json.dumps({"error": {"param": None, "code": None, **error}}).encode()
    return _Reply(status, body, headers)


@pytest.fixture
def fake_judge(settings: Any) -> Iterator[FakeJudgeServer]:
    """A started fake judge server, stopped after the test. The workbench's egress policy
    allows exactly its host:port, as an operator allows a local judge (JUDGE_PRIVATE_HOSTS);
    worker processes started meanwhile get the same (tests/conftest.py CeleryWorkers)."""
    with FakeJudgeServer() as server:
        settings.JUDGE_PRIVATE_HOSTS = [*settings.JUDGE_PRIVATE_HOSTS, server.host_port]
        yield server
