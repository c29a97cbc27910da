"""The circuit breaker over real HTTP: the judge client and the runtime's Grader against a
closed port, a port that resets every connection (so connection attempts can be counted), and
the fake judge going down and coming back. Time is a fake clock in the process's breakers;
every request is real. "No attempt while open" is asserted by counting at the port, not by
timing (bench/reward_api.py --dead-judge measures the time)."""

import asyncio
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from graders.engine import judge as judge_module
from graders.engine.breaker import Breaker, BreakerPolicy
from graders.engine.judge import ChatRequest, ChatResult, JudgeClient, JudgeSettings
from graders.engine.programs import ResponseInput, TaskInput, program_validate
from graders.engine.runtime import Grader, GradeResult
from tests.fakes.clock import FakeClock, breakers_on_fake_clock
from tests.fakes.openai_server import FakeJudgeServer, Fault

SCALAR: dict[str, Any] = {
    "kind": "scalar",
    "name": "Quality Score",
    "steps": [
        {
            "id": "grade",
            "prompt": "Score the response from 0 to 1.\n\nTask:\n{task.prompt}\n\n"
            "Response:\n{response}",
            "output": {"score": "float[0,1]"},
        }
    ],
    "reward": "grade.score",
}
TASK = TaskInput("lease", "Summarise the notice period.", "", ())
REFUSED = "ConnectError: could not connect"
SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["score"],
    "additionalProperties": False,
}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The process's breakers, fresh and on a fake clock, for this test."""
    fake = breakers_on_fake_clock(monkeypatch)
    return fake


def breaker_of(base_url: str) -> Breaker:
    return judge_module.BREAKERS.get(base_url, BreakerPolicy(3, 10))


@pytest.fixture
def closed_port() -> str:
    """A base URL whose port refuses connections: bound, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


class ResettingPort:
    """A port that accepts each connection and resets it at once, counting them: a judge
    behind a proxy whose backend is gone, and a way to see every connection attempt."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.base_url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/v1"
        self._lock = threading.Lock()
        self._accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def accepted(self) -> int:
        with self._lock:
            return self._accepted

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            with self._lock:
                self._accepted += 1
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()

    def close(self) -> None:
        self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        self._thread.join(timeout=5)


@pytest.fixture
def resetting_port() -> Iterator[ResettingPort]:
    port = ResettingPort()
    yield port
    port.close()


def grader_for(base_url: str, **settings: Any) -> Grader:
    options: dict[str, Any] = {"breaker_failures": 3, "breaker_cooldown_s": 10.0} | settings
    return Grader(program_validate(SCALAR), JudgeSettings(base_url, "judge-test", None, **options))


def group(step: int, size: int = 8) -> list[ResponseInput]:
    return [ResponseInput(f"r{n}", f"Step {step}, rollout {n}: 30 days.") for n in range(size)]


def errors(results: list[GradeResult]) -> list[str | None]:
    return [result.error for result in results]


def test_a_refused_port_opens_the_breaker_and_later_groups_fail_at_once(
    clock: FakeClock, closed_port: str
) -> None:
    grader = grader_for(closed_port)
    host_port = closed_port.removeprefix("http://").removesuffix("/v1")
    try:
        first = grader.score_group_sync(TASK, group(1))
        breaker = breaker_of(closed_port)
        assert breaker.state == "open" and breaker.opened == 1
        # Each call stops retrying once the breaker is open (its own failure or others').
        reason = f"step grade: judge at {host_port} unreachable: {REFUSED}; retrying in 10 s"
        assert errors(first) == [reason] * 8
        assert [result.reward for result in first] == [None] * 8
        rejected, retries = breaker.rejected, grader.usage.retries
        clock.now += 4
        second = grader.score_group_sync(TASK, group(2))
        assert errors(second) == [reason.replace("10 s", "6 s")] * 8
        assert breaker.rejected == rejected + 8  # all eight turned away before connecting
        assert grader.usage.retries == retries  # nobody waited out a back-off
    finally:
        grader.close()


def test_no_connection_is_attempted_while_open_then_one_probe(
    clock: FakeClock, resetting_port: ResettingPort
) -> None:
    grader = grader_for(resetting_port.base_url)
    try:
        first = grader.score_group_sync(TASK, group(1))
        assert all(error and "unreachable" in error for error in errors(first))
        breaker = breaker_of(resetting_port.base_url)
        assert breaker.state == "open"
        after_first = resetting_port.accepted
        assert after_first >= 3  # the three that opened it, and any already under way
        clock.now += 9.9
        grader.score_group_sync(TASK, group(2))
        assert resetting_port.accepted == after_first  # open: not one connection
        clock.now += 0.1  # the cool-down is over: one probe, which is reset too
        third = grader.score_group_sync(TASK, group(3))
        assert resetting_port.accepted == after_first + 1
        assert sum("a probe is under way" in (error or "") for error in errors(third)) == 7
        assert breaker.state == "open" and breaker.opened == 2
    finally:
        grader.close()


def test_the_fake_judge_goes_down_and_comes_back(
    clock: FakeClock, fake_judge: FakeJudgeServer
) -> None:
    grader = grader_for(fake_judge.base_url)
    try:
        assert [r.reward for r in grader.score_group_sync(TASK, group(1))] == [1.0] * 8
        assert fake_judge.call_count == 8
        breaker = breaker_of(fake_judge.base_url)

        fake_judge.go_down()
        down = grader.score_group_sync(TASK, group(2))
        assert all(error and "unreachable" in error for error in errors(down))
        assert breaker.state == "open"

        fake_judge.come_back()
        clock.now += 5
        still_open = grader.score_group_sync(TASK, group(3))
        # The last failure is a refusal, or a kept-alive connection the judge dropped.
        last = breaker_of(fake_judge.base_url)._last_failure
        assert last in (REFUSED, "ReadError: the connection failed")
        assert (
            errors(still_open)
            == [f"step grade: judge at {fake_judge.host_port} unreachable: {last}; retrying in 5 s"]
            * 8
        )
        assert fake_judge.call_count == 8  # up again, but nothing was sent while open

        clock.now += 5  # half-open: the probe reaches the judge and closes the breaker
        probed = grader.score_group_sync(TASK, group(4))
        assert fake_judge.call_count == 9
        assert sorted(r.reward for r in probed if r.ok) == [1.0]
        assert sum("a probe is under way" in (error or "") for error in errors(probed)) == 7
        assert breaker.state == "closed"

        recovered = grader.score_group_sync(TASK, group(5))
        assert [r.reward for r in recovered] == [1.0] * 8
        assert fake_judge.call_count == 17
    finally:
        grader.close()


async def complete(settings: JudgeSettings, name: str, *, fail_fast: bool = True) -> ChatResult:
    async with JudgeClient(
        settings, backoff_base_s=0.001, backoff_cap_s=0.001, fail_fast=fail_fast
    ) as client:
        messages = ({"role": "user", "content": name},)
        return await client.complete(ChatRequest(messages, SCORE_SCHEMA, name))


def test_a_503_storm_counts_and_429_500_and_timeouts_do_not(
    clock: FakeClock, fake_judge: FakeJudgeServer, caplog: pytest.LogCaptureFixture
) -> None:
    settings = JudgeSettings(
        fake_judge.base_url, "judge-test", None, timeout_s=0.2, max_retries=4,
        breaker_failures=3, breaker_cooldown_s=10,
    )  # fmt: skip
    breaker = breaker_of(fake_judge.base_url)
    # 429, 500 and a read timeout are answers (or slowness), not an absent judge.
    fake_judge.script(Fault("rate_limited", retry_after="0"), Fault("server_error"), Fault("hang"))
    fake_judge.script(Fault("server_error"))
    answered = asyncio.run(complete(settings, "a"))
    assert (answered.error, answered.refused) == (None, False)
    assert (fake_judge.call_count, breaker.state) == (5, "closed")
    # 503 three times in a row: the third opens it and the call stops retrying.
    fake_judge.script(*[Fault("unavailable")] * 5)
    caplog.set_level(logging.DEBUG)
    stopped = asyncio.run(complete(settings, "b"))
    reason = (
        f"judge at {fake_judge.host_port} unreachable: HTTP 503: service unavailable; "
        "retrying in 10 s"
    )
    assert (stopped.error, stopped.refused) == (reason, True)
    assert (fake_judge.call_count, breaker.state) == (8, "open")
    # Two 503s scripted are left; the next call sends nothing while open.
    refused = asyncio.run(complete(settings, "c"))
    assert (refused.error, refused.refused, fake_judge.call_count) == (reason, True, 8)
    # The opening is one warning; the refused calls are debug lines, not a warning each.
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        f"judge at {fake_judge.host_port} unreachable (3 failures in a row; last: HTTP 503: "
        "service unavailable): calls fail at once for 10 s, then one probes"
    ]


def test_a_job_client_waits_out_an_open_breaker_as_retries_sending_nothing(
    clock: FakeClock, fake_judge: FakeJudgeServer
) -> None:
    """Grading jobs and searches (fail_fast off) retry through a cool-down instead of failing
    at once; their refused attempts reach the judge no more than a trainer's do."""
    settings = JudgeSettings(
        fake_judge.base_url, "judge-test", None, max_retries=3,
        breaker_failures=3, breaker_cooldown_s=10,
    )  # fmt: skip
    breaker = breaker_of(fake_judge.base_url)
    for _ in range(3):  # as other calls of the process found it
        breaker.failure(REFUSED, probe=False)
    waited = asyncio.run(complete(settings, "job", fail_fast=False))
    assert waited.error == (
        f"gave up after 4 attempts; last: judge at {fake_judge.host_port} unreachable: "
        f"{REFUSED}; retrying in 10 s"
    )
    assert (waited.refused, fake_judge.call_count, breaker.rejected) == (False, 0, 4)
    clock.now += 10  # the cool-down is over: the job's next attempt is the probe
    assert asyncio.run(complete(settings, "job", fail_fast=False)).parsed == {"score": 1.0}
    assert (fake_judge.call_count, breaker.state) == (1, "closed")
