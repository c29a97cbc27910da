"""The time left a synthesis run's job shows, from its pace so far (hand-computed)."""

import pytest

from graders.synthesis.progress import eta_text


@pytest.mark.parametrize(
    ("done", "left", "seconds", "text"),
    [
        (0, 10, 30.0, ""),  # no cell finished yet: no pace to go by
        (4, 0, 30.0, ""),  # nothing left
        (4, 8, 30.0, " · about 60 s left"),  # 7.5 s a cell, 8 cells
        (1, 2, 60.0, " · about 2 min left"),  # 120 s: past 90 s, in minutes
        (2, 30, 600.0, " · about 2.5 h left"),  # 300 s a cell, 9000 s
        (3, 1, 0.3, " · about 1 s left"),  # never "0 s"
    ],
)
def test_eta_text(done: int, left: int, seconds: float, text: str) -> None:
    assert eta_text(done=done, left=left, seconds=seconds) == text
