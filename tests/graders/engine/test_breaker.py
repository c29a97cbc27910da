"""The circuit breaker's state machine (graders/engine/breaker.py) on a fake clock: timelines
worked out by hand, second by second. Real HTTP through the judge client and the runtime is in
test_breaker_http.py."""

import threading

import pytest

from graders.engine.breaker import (
    Breaker,
    BreakerOpen,
    BreakerPolicy,
    Breakers,
    breaker_policy,
    endpoint_key,
)
from graders.engine.judge import JudgeSettings
from graders.engine.runtime import BundleInvalid, load_bundle
from tests.fakes.clock import FakeClock
from tests.graders.engine.test_runtime import SCALAR, bundle_dict

REFUSED = "ConnectError: could not connect"


def refusal(breaker: Breaker) -> str:
    with pytest.raises(BreakerOpen) as refused:
        breaker.admit()
    return str(refused.value)


def test_a_timeline_of_opening_probing_and_closing() -> None:
    clock = FakeClock()
    breaker = Breaker("judge.test:443", BreakerPolicy(failures=3, cooldown_s=10), clock)
    # t=0: two failures, then an answer: the count starts again.
    for _ in range(2):
        assert breaker.admit() is False
        breaker.failure(REFUSED, probe=False)
    breaker.success()
    assert breaker.state == "closed"
    # t=1, 2, 3: three in a row open it at t=3, for 10 s.
    for second in (1, 2, 3):
        clock.now = second
        assert breaker.admit() is False
        breaker.failure(REFUSED if second < 3 else "HTTP 503: service unavailable", probe=False)
    assert (breaker.state, breaker.opened) == ("open", 1)
    assert refusal(breaker) == (
        "judge at judge.test:443 unreachable: HTTP 503: service unavailable; retrying in 10 s"
    )
    clock.now = 7.5  # 5.5 s left, rounded up
    assert refusal(breaker).endswith("; retrying in 6 s")
    clock.now = 12.9
    assert refusal(breaker).endswith("; retrying in 1 s")
    # t=13: the cool-down is over: one probe, the others still turned away.
    clock.now = 13
    assert breaker.state == "half-open"
    assert breaker.admit() is True
    assert refusal(breaker).endswith("; a probe is under way")
    # t=14: the probe fails: open again from t=14 to t=24.
    clock.now = 14
    breaker.failure(REFUSED, probe=True)
    assert (breaker.state, breaker.opened) == ("open", 2)
    assert refusal(breaker) == (f"judge at judge.test:443 unreachable: {REFUSED}; retrying in 10 s")
    clock.now = 23.9
    assert refusal(breaker).endswith("; retrying in 1 s")
    # t=24: a probe that ends without a verdict (a read timeout) frees the slot...
    clock.now = 24
    assert breaker.admit() is True
    breaker.inconclusive(probe=True)
    # ...so the next call probes, and its answer closes the breaker.
    assert breaker.admit() is True
    breaker.success()
    assert breaker.state == "closed"
    assert breaker.admit() is False
    # Turned away: t=3, 7.5, 12.9, 13 (probe under way), 14, 23.9.
    assert breaker.rejected == 6


def test_a_late_failure_of_a_call_admitted_before_the_opening_does_not_extend_it() -> None:
    clock = FakeClock()
    breaker = Breaker("judge.test:80", BreakerPolicy(failures=2, cooldown_s=10), clock)
    breaker.failure(REFUSED, probe=False)
    breaker.failure(REFUSED, probe=False)  # t=0: open until t=10
    clock.now = 9
    breaker.failure("ReadError: the connection failed", probe=False)  # an old call ends
    assert refusal(breaker) == (
        "judge at judge.test:80 unreachable: ReadError: the connection failed; retrying in 1 s"
    )
    clock.now = 10
    assert breaker.admit() is True
    assert breaker.opened == 1


def test_any_answer_closes_an_open_breaker() -> None:
    """A call admitted before the opening that comes back answered shows the judge is up."""
    breaker = Breaker("judge.test:80", BreakerPolicy(failures=1, cooldown_s=10), FakeClock())
    breaker.failure(REFUSED, probe=False)
    assert breaker.state == "open"
    breaker.success()
    assert (breaker.state, breaker.admit()) == ("closed", False)


def test_zero_failures_turns_the_breaker_off() -> None:
    breaker = Breaker("judge.test:80", BreakerPolicy(failures=0, cooldown_s=10), FakeClock())
    for _ in range(100):
        assert breaker.admit() is False
        breaker.failure(REFUSED, probe=False)
    assert (breaker.state, breaker.opened, breaker.rejected) == ("closed", 0, 0)


def test_check_turns_away_like_admit_but_claims_no_probe() -> None:
    clock = FakeClock()
    breaker = Breaker("judge.test:80", BreakerPolicy(failures=1, cooldown_s=5), clock)
    breaker.failure(REFUSED, probe=False)
    with pytest.raises(BreakerOpen):
        breaker.check()
    clock.now = 5
    breaker.check()  # half-open, no probe under way: an attempt would go through
    breaker.check()
    assert breaker.admit() is True  # the probe is still there to take


def test_threads_racing_for_the_probe_get_exactly_one() -> None:
    clock = FakeClock()
    breaker = Breaker("judge.test:80", BreakerPolicy(failures=1, cooldown_s=1), clock)
    breaker.failure(REFUSED, probe=False)
    clock.now = 1
    probes: list[bool] = []
    start = threading.Barrier(16)

    def race() -> None:
        start.wait()
        try:
            probes.append(breaker.admit())
        except BreakerOpen:
            probes.append(False)

    threads = [threading.Thread(target=race) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert probes.count(True) == 1 and breaker.rejected == 15


@pytest.mark.parametrize(
    ("base_url", "key"),
    [
        ("https://api.openai.com/v1", "api.openai.com:443"),
        ("http://127.0.0.1:8089/v1", "127.0.0.1:8089"),
        ("http://judge.internal/v1/", "judge.internal:80"),
        ("http://[::1]:9000/v1", "[::1]:9000"),
        ("https://Judge.Example:8443", "judge.example:8443"),
    ],
)
def test_one_breaker_per_host_and_port(base_url: str, key: str) -> None:
    assert endpoint_key(base_url) == key


def test_endpoints_share_a_breaker_by_host_and_port_and_follow_the_latest_policy() -> None:
    breakers = Breakers(clock=FakeClock())
    first = breakers.get("http://judge.test:8000/v1", BreakerPolicy(3, 10))
    again = breakers.get("http://judge.test:8000/other", BreakerPolicy(4, 20))
    assert again is first and first.policy == BreakerPolicy(4, 20)
    assert breakers.get("http://judge.test:8001/v1", BreakerPolicy()) is not first


def test_memory_is_bounded_least_recently_used_first() -> None:
    breakers = Breakers(max_endpoints=3, clock=FakeClock())
    a = breakers.get("http://a:1", BreakerPolicy())
    breakers.get("http://b:1", BreakerPolicy())
    breakers.get("http://c:1", BreakerPolicy())
    assert breakers.get("http://a:1", BreakerPolicy()) is a  # a is now the most recent
    breakers.get("http://d:1", BreakerPolicy())  # b goes
    assert len(breakers) == 3
    assert breakers.get("http://a:1", BreakerPolicy()) is a
    for _ in range(1000):
        breakers.get(f"http://host-{_}:1", BreakerPolicy())
    assert len(breakers) == 3


def test_the_policy_comes_from_settings_then_the_environment_then_defaults() -> None:
    assert breaker_policy(environ={}) == BreakerPolicy(5, 15.0)
    environ = {"JUDGE_BREAKER_FAILURES": "2", "JUDGE_BREAKER_COOLDOWN_S": "2.5"}
    assert breaker_policy(environ=environ) == BreakerPolicy(2, 2.5)
    assert breaker_policy(7, None, environ=environ) == BreakerPolicy(7, 2.5)
    assert breaker_policy(0, 1, environ={}) == BreakerPolicy(0, 1)
    with pytest.raises(ValueError, match="JUDGE_BREAKER_FAILURES='many' is not a number"):
        breaker_policy(environ={"JUDGE_BREAKER_FAILURES": "many"})


@pytest.mark.parametrize(
    ("failures", "cooldown_s"),
    [(-1, None), (None, 0), (None, float("inf")), ("3", None), (True, None), (None, "5")],
)
def test_judge_settings_refuse_a_bad_breaker_setting(failures: object, cooldown_s: object) -> None:
    with pytest.raises(ValueError, match="breaker"):
        JudgeSettings(
            "http://judge.test/v1",
            "m",
            None,
            breaker_failures=failures,  # type: ignore[arg-type]
            breaker_cooldown_s=cooldown_s,  # type: ignore[arg-type]
        )


def test_a_bundle_sets_the_breaker_and_a_bad_setting_is_refused_by_name() -> None:
    bundle = bundle_dict(SCALAR, "http://judge.test/v1")
    bundle["judge"] |= {"breaker_failures": 2, "breaker_cooldown_s": 3}
    settings = load_bundle(bundle).settings
    assert (settings.breaker_failures, settings.breaker_cooldown_s) == (2, 3)
    bundle["judge"]["breaker_failures"] = -1
    with pytest.raises(BundleInvalid) as refused:
        load_bundle(bundle)
    assert refused.value.messages == ["judge: breaker failures must be 0 (off) or more"]
