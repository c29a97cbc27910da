"""Following a workbench alias from a training job: the grader a trainer uses moves when the
alias (`production`, say) is promoted in the workbench, or stays pinned to one version.

    from graders.engine.runtime import follow_alias, TRLReward
    grader = follow_alias(
        "https://workbench.example/api/p/acme/graders/alias/production/bundle",
        os.environ["WORKBENCH_TOKEN"],          # a project token with the export scope
        recheck_seconds=300,
    )
    reward = TRLReward(grader, num_generations=8)

The alias's bundle endpoint answers with the bundle and a strong ETag, the version's content
hash. A re-check is one GET with If-None-Match, which the workbench answers 304 Not
Modified until the alias moves; then the new bundle is loaded (load_bundle checks its hash)
and a switch is logged with both hashes. Re-checks happen only when a trainer adapter asks
for the version to grade its next call with (trainers.py), never while a call is being
graded, so every group is graded by the version it started with: a switch falls between
groups, never inside one, for every call that holds whole groups (a per-sample call holds
one response of a group; trainers.py says what that means). `recheck_seconds=0` re-checks
before every call.

A failed re-check (the workbench down, a revoked token) is logged and the version in use is
kept: training must not stop because the workbench blinked. Only the first load raises.

Pinned (`pinned_hash`): the runtime loads the alias's bundle once and refuses it
(FollowRefused, naming both hashes) unless it is exactly that version; a pinned runtime
never re-checks. A version of another kind than the first is refused the same way (the
workbench never moves an alias across kinds; a trainer's setup depends on the kind).

Outbound requests obey `egress` (egress.py) as the judge client does: the URL is checked
before anything is sent, and every connection's resolved addresses are checked by the
aiohttp resolver the judge's connections use (judge_http.EgressResolver); a refusal is an
EgressRefused. Redirects are not followed, so the token goes only where the URL says.
Versions replaced by a switch are kept (a group may still be grading with one) until
`close()`.
"""

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp.transport import map_aiohttp_exceptions

from graders.engine.bundle import Grader, load_bundle
from graders.engine.egress import EgressPolicy
from graders.engine.judge_http import EgressResolver, ssl_context
from graders.engine.reward import excerpt

DEFAULT_RECHECK_S = 60.0
DEFAULT_TIMEOUT_S = 30.0

_log = logging.getLogger(__name__)


class FollowRefused(ValueError):
    """The alias serves a bundle this runtime will not use; the message says why."""


class FollowFailed(RuntimeError):
    """The workbench did not hand over a bundle (network, status, not JSON)."""


class FollowedGrader:
    """A grader that follows a workbench alias. Trainer adapters (trainers.py) take it where
    they take a Grader and ask `current()` (or `current_async()`) once per call, for the
    version to grade that call's groups with.

    `url` is the alias's bundle endpoint, `.../api/p/<slug>/graders/alias/<name>/bundle`;
    `token` a project token with the export scope. `load_options` go to load_bundle for
    every version (judge_base_url, cache, rubric_cache_path, budget). `workbench_transport`
    replaces the HTTP transport for the workbench (tests, proxies); the caller closes it.
    `clock` is the monotonic clock the re-check interval is measured on.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        recheck_seconds: float = DEFAULT_RECHECK_S,
        pinned_hash: str | None = None,
        egress: EgressPolicy | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        workbench_transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        **load_options: Any,
    ) -> None:
        if recheck_seconds < 0:
            raise ValueError("recheck_seconds must be 0 (every call) or more")
        if egress is not None:
            egress.check(url, None)
            if workbench_transport is not None and (
                getattr(workbench_transport, "egress", None) != egress
            ):
                raise ValueError("the workbench transport does not enforce the egress policy")
        self.url = url
        self.recheck_seconds = recheck_seconds
        self.pinned_hash = pinned_hash
        self.egress = egress
        self.timeout_s = timeout_s
        self.load_options = load_options
        self._token = token
        self._transport = workbench_transport
        self._clock = clock
        self._grader: Grader | None = None
        self._checked_at = 0.0
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._retired: list[Grader] = []

    # Trainers ship reward functions to workers by pickling them; the lock and the replaced
    # versions stay behind (the version in use travels, and pickles itself).
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_lock", "_retired"):
            state.pop(name)
        state["_transport"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        version = self._grader.info.content_hash[:12] if self._grader else "not loaded"
        pinned = ", pinned" if self.pinned_hash else ""
        return f"<FollowedGrader {self.url} {version}{pinned}>"

    @property
    def grader(self) -> Grader:
        """The version in use, loaded on first access; never re-checks."""
        if self._grader is None:
            return self.current()
        return self._grader

    @property
    def content_hash(self) -> str:
        return self.grader.info.content_hash

    def current(self) -> Grader:
        """The version to grade the next call with, re-checking the alias first when
        `recheck_seconds` have passed. Blocking; from inside an event loop, await
        current_async instead."""
        if not self._due():
            assert self._grader is not None
            return self._grader
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.current_async())
        raise RuntimeError("FollowedGrader.current() was called inside an event loop; await "
                           "current_async() instead")  # fmt: skip

    async def current_async(self) -> Grader:
        """current(), on the running event loop."""
        if not self._due():
            assert self._grader is not None
            return self._grader
        if self._grader is None:
            # The first load: every caller waits for it (a thread that holds the lock is
            # loading, and there is nothing to grade with meanwhile).
            await asyncio.to_thread(self._lock.acquire)
        elif not self._lock.acquire(blocking=False):
            return self._grader  # another caller is re-checking; go on with this version
        try:
            if self._due():
                await self._recheck()
        finally:
            self._lock.release()
        assert self._grader is not None
        return self._grader

    def close(self) -> None:
        """Close the synchronous loops of every version loaded (see Grader.close)."""
        with self._lock:
            graders = [*self._retired, *([self._grader] if self._grader else [])]
            self._retired = []
        for grader in graders:
            grader.close()

    def _due(self) -> bool:
        if self._grader is None:
            return True
        if self.pinned_hash is not None:
            return False
        return self._clock() - self._checked_at >= self.recheck_seconds

    async def _recheck(self) -> None:
        first = self._grader is None
        self._checked_at = self._clock()
        try:
            data = await self._fetch(None if first else self._grader_hash())
            if data is not None:
                self._switch(load_bundle(data, **self.load_options))
        except Exception as exc:
            if first:
                raise
            _log.warning(
                "grader alias %s: re-check failed (%s); still grading with %s",
                self.url,
                exc,
                self._grader_hash(),
            )

    def _grader_hash(self) -> str:
        assert self._grader is not None
        return self._grader.info.content_hash

    def _switch(self, new: Grader) -> None:
        old = self._grader
        found = new.info.content_hash
        if self.pinned_hash is not None and found != self.pinned_hash:
            new.close()
            raise FollowRefused(
                f"the alias at {self.url} serves version {found}, but this runtime is pinned "
                f"to {self.pinned_hash}: roll the alias back to it, or drop pinned_hash to "
                "follow the alias"
            )
        if old is None:
            self._grader = new
            _log.info("grader alias %s: loaded %s (%s)", self.url, found, new.name)
            return
        if new.kind != old.kind:
            new.close()
            raise FollowRefused(
                f"the alias at {self.url} now serves a {new.kind} grader ({found}), but this "
                f"runtime was set up for {old.kind}; still grading with {old.info.content_hash}"
            )
        self._retired.append(old)
        self._grader = new
        _log.info(
            "grader alias %s moved: %s -> %s (%s); the next groups are graded by the new version",
            self.url,
            old.info.content_hash,
            found,
            new.name,
        )

    async def _fetch(self, etag: str | None) -> Mapping[str, Any] | None:
        """The alias's bundle, or None when the workbench answers 304 (still `etag`)."""
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if etag is not None:
            headers["If-None-Match"] = f'"{etag}"'
        if self.egress is not None:
            self.egress.check(self.url, None)
        try:
            status, reply_headers, content = await self._get(headers)
        except httpx.HTTPError as exc:
            raise FollowFailed(f"GET {self.url} failed: {exc!r}") from exc
        if status == 304 and etag is not None:
            return None
        if status != 200:
            raise FollowFailed(f"GET {self.url} answered {status}: {_detail(content)}")
        try:
            data = json.loads(content)
        except ValueError as exc:
            raise FollowFailed(f"GET {self.url} did not answer JSON: {exc}") from None
        if not isinstance(data, dict):
            raise FollowFailed(f"GET {self.url} answered {excerpt(data)}, not a bundle")
        tag = reply_headers.get("ETag", "").removeprefix("W/").strip('"')
        stated = (data.get("grader") or {}).get("content_hash")
        if tag and tag != stated:
            raise FollowFailed(
                f"GET {self.url}: the ETag names {tag} but the bundle is {excerpt(stated)}"
            )
        return data

    async def _get(self, headers: Mapping[str, str]) -> tuple[int, Mapping[str, str], bytes]:
        """One GET of the URL: through the caller's transport, else a one-connection aiohttp
        session whose resolver enforces the egress policy (judge_http.EgressResolver, as
        the judge client's connections do). Failures are the httpx exceptions."""
        if self._transport is not None:
            request = httpx.Request(
                "GET",
                self.url,
                headers=headers,
                extensions={"timeout": httpx.Timeout(self.timeout_s).as_dict()},
            )
            reply = await self._transport.handle_async_request(request)
            return reply.status_code, reply.headers, await reply.aread()
        connector = aiohttp.TCPConnector(
            limit=1,
            ssl=ssl_context(),
            resolver=EgressResolver(self.egress) if self.egress is not None else None,
        )
        async with aiohttp.ClientSession(connector=connector) as session:
            with map_aiohttp_exceptions():
                async with session.get(
                    self.url,
                    headers=headers,
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                ) as response:
                    return response.status, response.headers, await response.read()


def _detail(content: bytes) -> str:
    """What an error answer says: the workbench's {"detail": ...}, else its first bytes."""
    text = content.decode("utf-8", errors="replace")
    try:
        detail = json.loads(text).get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else text[:200]


def follow_alias(
    url: str,
    token: str,
    *,
    recheck_seconds: float = DEFAULT_RECHECK_S,
    pinned_hash: str | None = None,
    **options: Any,
) -> FollowedGrader:
    """A FollowedGrader with its first version loaded, so a wrong URL, token or pin fails
    here, before training starts (FollowFailed, FollowRefused, BundleInvalid,
    EgressRefused). Call it outside an event loop; inside one, make a FollowedGrader and
    await current_async().
    `options` are FollowedGrader's."""
    follower = FollowedGrader(
        url, token, recheck_seconds=recheck_seconds, pinned_hash=pinned_hash, **options
    )
    follower.current()
    return follower
