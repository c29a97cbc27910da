"""A clock a test moves by hand, and the process's judge breakers put on one."""

import pytest

from graders.engine import judge as judge_module
from graders.engine.breaker import Breakers


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def breakers_on_fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """Fresh breakers for this test (the judge client's process-wide BREAKERS), on a clock
    the test moves."""
    fake = FakeClock(1000.0)
    monkeypatch.setattr(judge_module, "BREAKERS", Breakers(clock=fake))
    return fake
