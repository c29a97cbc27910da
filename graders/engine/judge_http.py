"""HTTP for the judge client: an aiohttp connection pool with a direct path for judge calls.

`JudgeTransport` is an httpx transport (any httpx.Request goes through `handle_async_request`),
and the judge client, which sends nothing but POSTs of bytes it has already encoded, calls its
`post` instead. That skips the httpx.Request and httpx.Response built around every call and
httpx-aiohttp's streaming adapter, about a third of a call's CPU: 494 us per call through
httpx-aiohttp against 314 us straight on aiohttp (one process, the fake judge at zero latency,
calls in sequence). The bytes on the wire are the same either way (tests/graders/engine/
test_judge.py), so judges and their caches see no difference.

Failures come out as the httpx exceptions httpx-aiohttp maps them to, so the client's retry
rules read one set of exception types whichever path a call took; except that a connection
refused or reset is ConnectError or ReadError, where httpx-aiohttp says ConnectTimeout.
"""

import contextlib
import functools
import json
import socket
import ssl
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from httpx_aiohttp.transport import map_aiohttp_exceptions
from multidict import CIMultiDictProxy

from graders.engine.egress import EgressPolicy

HeaderPairs = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Reply:
    """What the judge answered: the parts of an httpx.Response the judge client reads."""

    status_code: int
    reason_phrase: str
    headers: CIMultiDictProxy[str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class HttpReply(Protocol):
    """A judge's answer as the client reads it: a Reply, or an httpx.Response from another
    transport (httpx.MockTransport in tests)."""

    @property
    def status_code(self) -> int: ...

    @property
    def reason_phrase(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


class EgressResolver(AbstractResolver):
    """aiohttp's resolver, refusing (EgressRefused) a host that resolves to an address the
    policy does not allow. aiohttp resolves when it opens a connection (IP addresses in a URL
    skip resolving; EgressPolicy.check refuses those before a call), so the check costs
    nothing on a kept-alive connection, and a name that resolves elsewhere later is checked
    again on its next connection."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._resolver = aiohttp.DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await self._resolver.resolve(host, port, family)
        self._policy.check_addresses(host, port, [address["host"] for address in addresses])
        return addresses

    async def close(self) -> None:
        await self._resolver.close()


class JudgeTransport(httpx.AsyncBaseTransport):
    """At most `max_connections` keep-alive connections, made on first use in the running
    event loop (aiohttp sessions belong to one loop), each to an address `egress` allows
    (when given)."""

    def __init__(
        self,
        *,
        max_connections: int,
        ssl_context: ssl.SSLContext,
        keepalive_s: float = 5.0,
        egress: EgressPolicy | None = None,
    ) -> None:
        self._limit = max_connections
        self._ssl = ssl_context
        self._keepalive_s = keepalive_s
        self.egress = egress
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._limit,
                keepalive_timeout=self._keepalive_s,
                ssl=self._ssl,
                resolver=EgressResolver(self.egress) if self.egress is not None else None,
            )
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def post(
        self,
        url: str,
        headers: HeaderPairs,
        body: bytes,
        timeout: aiohttp.ClientTimeout,
        *,
        decompress: bool = True,
    ) -> Reply:
        """POST `body` with exactly these headers; the whole answer, read, and decoded as its
        Content-Encoding says unless `decompress` is off (httpx decodes for itself)."""
        try:
            with map_aiohttp_exceptions(), _connection_failures_named():
                async with self._client().post(
                    url,
                    data=body,
                    headers=headers,
                    allow_redirects=False,
                    auto_decompress=decompress,
                    compress=False,
                    timeout=timeout,
                ) as response:
                    content = await response.read()
        except aiohttp.ClientResponseError:
            # An answer that is not HTTP (another protocol's banner, say): aiohttp quotes its
            # bytes in the message and httpx-aiohttp leaves it unmapped. Neither goes further.
            raise httpx.RemoteProtocolError("the answer is not valid HTTP") from None
        return Reply(response.status, response.reason or "", response.headers, content)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        reply = await self.post(
            str(request.url),
            list(request.headers.items()),  # as httpx-aiohttp hands them to aiohttp
            await request.aread(),
            client_timeout(request.extensions.get("timeout", {})),
            decompress=False,
        )
        return httpx.Response(
            reply.status_code,
            headers=list(reply.headers.items()),
            content=reply.content,
            request=request,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@contextlib.contextmanager
def _connection_failures_named() -> Iterator[None]:
    """httpx-aiohttp maps every aiohttp connection error to ConnectTimeout, so a refused
    connection read "timed out"; these two say what happened (the circuit breaker quotes
    it): no connection made is ConnectError, one dropped before the answer is ReadError."""
    try:
        yield
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(str(exc)) from exc
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        raise httpx.ReadError(str(exc)) from exc


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One context per process: loading the CA bundle costs about 50 ms of CPU, which a worker
    building a client per task would otherwise pay every time."""
    return httpx.create_ssl_context()


def client_timeout(timeout: dict[str, float | None]) -> aiohttp.ClientTimeout:
    """httpx's timeouts (as Timeout.as_dict gives them) in aiohttp's terms, as httpx-aiohttp
    maps them: connect to the socket's connect, read to each socket read, pool to the whole
    wait for a connection. httpx's write timeout has no aiohttp counterpart."""
    return aiohttp.ClientTimeout(
        sock_connect=timeout.get("connect"),
        sock_read=timeout.get("read"),
        connect=timeout.get("pool"),
    )
