"""The fake server's heavy-tailed latency (tests/fakes/openai_server.py), which the synthesis
bench's bound is computed from."""

import statistics

from tests.fakes.openai_server import heavy_tail_latency


def _body(index: int, seed: int | None = 0) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": f"q{index}"}], "seed": seed}


def test_median_and_tail_share_as_asked_and_the_same_request_takes_the_same_time() -> None:
    latency = heavy_tail_latency()
    draws = [latency(_body(i)) for i in range(20_000)]
    tail = sum(draw == 100.0 for draw in draws) / len(draws)
    assert 0.008 <= tail <= 0.012  # 1% of 20,000: 200 +/- 14 (sd)
    assert 0.72 <= statistics.median(draws) <= 0.78
    assert max(draw for draw in draws if draw < 100) < 20  # the body stays log-normal
    assert latency(_body(7)) == latency(_body(7)) != latency(_body(7, seed=1))


def test_scale_shrinks_every_latency() -> None:
    full, tenth = heavy_tail_latency(), heavy_tail_latency(scale=0.1)
    assert all(abs(tenth(_body(i)) - full(_body(i)) / 10) < 1e-12 for i in range(200))
