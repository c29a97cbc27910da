"""Circuit breakers for judge endpoints: once a judge is down, calls to it fail at once with
the reason instead of each spending its retries (about 6.5 s of back-off) on a dead host.

One breaker per endpoint (the host:port of its base URL) per process, shared by every judge
client of the process: the runtime's Grader in a trainer, every reward API request of a server
process, a grading worker. States, with `failures` and `cooldown_s` from BreakerPolicy:

- closed: calls go through; `failures` consecutive connection failures open it;
- open: for `cooldown_s` every call fails at once with BreakerOpen, whose message names the
  endpoint, the last failure and the seconds left ("judge at host:8000 unreachable:
  ConnectError: could not connect; retrying in 12 s");
- half-open (the cool-down is over): the next call goes through as the probe and the others
  keep failing at once; the probe's success closes the breaker, its failure opens it for
  another cool-down, and a probe that ends with no verdict (cancelled, a read timeout) lets
  the next call probe.

What counts (`Breaker.failure`): the judge's server did not answer at all, or a gateway in
front of it said it is down. That is a connection refused, reset or closed before an answer,
a connect timeout, a name that does not resolve, and the answers 502, 503 and 504 (a proxy's
"the server behind me is down or overloaded": a 503 storm counts). Every other answer (200,
4xx, 429, 500) shows the judge is there and resets the count (`success`): a 429 is paced by
the client's retries and Retry-After, a 400 or a 500 is about one request. A read timeout
counts neither way (`inconclusive`): the connection was made, and slow is not dead.

Thread-safe and asyncio-safe: state changes under a threading.Lock held for a few lines and
never across an await, so calls from any thread or event loop may share a breaker. Memory is
bounded: at most MAX_ENDPOINTS breakers per process, the least recently used dropped first.
"""

import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

_log = logging.getLogger(__name__)

DEFAULT_FAILURES = 5
DEFAULT_COOLDOWN_S = 15.0
FAILURES_ENV = "JUDGE_BREAKER_FAILURES"
COOLDOWN_ENV = "JUDGE_BREAKER_COOLDOWN_S"
MAX_ENDPOINTS = 256
# The statuses a gateway answers for a server behind it that is down or overloaded.
GATEWAY_DOWN = frozenset({502, 503, 504})

Clock = Callable[[], float]


class BreakerOpen(Exception):
    """The endpoint's breaker is open: no request was sent. The message says why;
    `retry_in_s` is the cool-down left (0 when it is over and another call is the probe)."""

    def __init__(self, message: str, retry_in_s: float) -> None:
        super().__init__(message)
        self.retry_in_s = retry_in_s


@dataclass(frozen=True)
class BreakerPolicy:
    """Open after `failures` consecutive connection failures (0: never) for `cooldown_s`."""

    failures: int = DEFAULT_FAILURES
    cooldown_s: float = DEFAULT_COOLDOWN_S

    def __post_init__(self) -> None:
        if isinstance(self.failures, bool) or not isinstance(self.failures, int):
            raise ValueError(f"breaker failures must be an integer, not {self.failures!r}")
        if self.failures < 0:
            raise ValueError("breaker failures must be 0 (off) or more")
        if not isinstance(self.cooldown_s, int | float) or isinstance(self.cooldown_s, bool):
            raise ValueError(f"breaker cool-down must be a number, not {self.cooldown_s!r}")
        if not (math.isfinite(self.cooldown_s) and self.cooldown_s > 0):
            raise ValueError("breaker cool-down must be a positive number of seconds")


def breaker_policy(
    failures: int | None = None,
    cooldown_s: float | None = None,
    environ: Mapping[str, str] = os.environ,
) -> BreakerPolicy:
    """The policy a judge's settings ask for; a value they leave None comes from the
    environment (JUDGE_BREAKER_FAILURES, JUDGE_BREAKER_COOLDOWN_S), else the default."""
    if failures is None:
        failures = int(_env_text(environ, FAILURES_ENV, int) or DEFAULT_FAILURES)
    if cooldown_s is None:
        cooldown_s = float(_env_text(environ, COOLDOWN_ENV, float) or DEFAULT_COOLDOWN_S)
    return BreakerPolicy(failures, cooldown_s)


def _env_text(environ: Mapping[str, str], name: str, kind: Callable[[str], object]) -> str:
    """The variable's value, checked to read as `kind` ("" when unset or blank)."""
    text = environ.get(name, "").strip()
    if text:
        try:
            kind(text)
        except ValueError:
            raise ValueError(f"{name}={text!r} is not a number") from None
    return text


def endpoint_key(base_url: str) -> str:
    """host:port of a base URL (the scheme's default port when it names none)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Breaker:
    """The breaker of one endpoint (see the module docstring). A caller asks `admit` before
    each attempt and reports how it went with exactly one of success, failure or
    inconclusive, passing to the last two what admit returned (whether it is the probe)."""

    def __init__(self, endpoint: str, policy: BreakerPolicy, clock: Clock = time.monotonic):
        self.endpoint = endpoint
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._consecutive = 0
        self._last_failure = ""
        self._opened_at: float | None = None
        self._probing = False
        # For tests and logs: how often it opened, and how many attempts it turned away.
        self.opened = 0
        self.rejected = 0

    @property
    def state(self) -> str:
        """closed, open or half-open, now."""
        with self._lock:
            if self._opened_at is None:
                return "closed"
            return "open" if self._remaining() > 0 else "half-open"

    def check(self) -> None:
        """Raise BreakerOpen if an attempt now would be turned away; claims nothing."""
        with self._lock:
            self._refusal()

    def admit(self) -> bool:
        """Let an attempt through, or raise BreakerOpen. True when the attempt is the probe
        of a half-open breaker, whose verdict decides the breaker's state."""
        with self._lock:
            self._refusal()
            if self._opened_at is None:
                return False
            self._probing = True
            return True

    def success(self) -> None:
        """The endpoint answered (a probe or any other attempt): the breaker closes and the
        count starts again."""
        with self._lock:
            was_open = self._opened_at is not None
            self._consecutive = 0
            self._opened_at = None
            self._probing = False
        if was_open:  # logged outside the lock, which every attempt takes
            _log.warning("judge at %s answers again: calls go through", self.endpoint)

    def failure(self, reason: str, probe: bool) -> None:
        """The endpoint did not answer (`reason` says how, in our words, never the server's):
        the count grows; the breaker opens at the policy's count, or anew when the probe
        failed."""
        with self._lock:
            self._consecutive += 1
            self._last_failure = reason
            self._probing = self._probing and not probe
            opens = probe or (
                self._opened_at is None
                and bool(self.policy.failures)
                and self._consecutive >= self.policy.failures
            )
            if opens:
                self._opened_at = self._clock()
                self.opened += 1
            consecutive, cooldown_s = self._consecutive, self.policy.cooldown_s
        if opens:
            _log.warning(
                "judge at %s unreachable (%d failures in a row; last: %s): calls fail at "
                "once for %g s, then one probes",
                self.endpoint,
                consecutive,
                reason,
                cooldown_s,
            )

    def inconclusive(self, probe: bool) -> None:
        """The attempt ended without saying whether the endpoint is up; a probe's slot is
        free again for the next call."""
        if probe:
            with self._lock:
                self._probing = False

    def _remaining(self) -> float:
        assert self._opened_at is not None
        return self._opened_at + self.policy.cooldown_s - self._clock()

    def _refusal(self) -> None:
        """Raise BreakerOpen when an attempt must be turned away (the lock is held)."""
        if self._opened_at is None or not self.policy.failures:
            return
        remaining = max(0.0, self._remaining())
        if remaining > 0:
            then = f"retrying in {math.ceil(remaining)} s"
        elif self._probing:
            then = "a probe is under way"
        else:
            return
        self.rejected += 1
        raise BreakerOpen(
            f"judge at {self.endpoint} unreachable: {self._last_failure}; {then}", remaining
        )


class Breakers:
    """The breakers of a process, by endpoint; at most `max_endpoints`, the least recently
    used dropped first (its endpoint starts again closed if it is called later)."""

    def __init__(self, max_endpoints: int = MAX_ENDPOINTS, clock: Clock = time.monotonic):
        self._max = max_endpoints
        self._clock = clock
        self._lock = threading.Lock()
        self._breakers: OrderedDict[str, Breaker] = OrderedDict()

    def __len__(self) -> int:
        return len(self._breakers)

    def get(self, base_url: str, policy: BreakerPolicy) -> Breaker:
        """The endpoint's breaker, made on first use; it follows the latest policy asked for."""
        key = endpoint_key(base_url)
        with self._lock:
            breaker = self._breakers.get(key)
            if breaker is None:
                breaker = self._breakers[key] = Breaker(key, policy, self._clock)
                while len(self._breakers) > self._max:
                    self._breakers.popitem(last=False)
            else:
                self._breakers.move_to_end(key)
                breaker.policy = policy
            return breaker


# The process's breakers, which every judge client uses (graders/engine/judge.py).
BREAKERS = Breakers()
