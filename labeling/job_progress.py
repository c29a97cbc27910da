"""A job's pace from what it has done so far: the rate it went at since it started and the time
left at that rate, in words for the progress bars ("about 4 min left", "2.8 a second")."""

from dataclasses import dataclass
from datetime import datetime


def duration_text(seconds: float) -> str:
    """A duration as people say it: '45 s', '4 min', '2 h 5 min' (to the nearest second below a
    minute, to the nearest minute above)."""
    if round(seconds) < 60:
        return f"{max(0, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


@dataclass(frozen=True)
class JobEta:
    """The observed rate (items a second since the start) and the seconds left at that rate."""

    rate: float
    seconds_left: float

    @property
    def left_text(self) -> str:
        if self.seconds_left < 60:
            return "less than a minute left"
        return f"about {duration_text(self.seconds_left)} left"

    @property
    def rate_text(self) -> str:
        for per, unit in ((1, "a second"), (60, "a minute"), (3600, "an hour")):
            if self.rate * per >= 1:
                return f"{self.rate * per:,.1f} {unit}"
        return f"{self.rate * 86400:,.1f} a day"

    def __str__(self) -> str:
        return f"{self.left_text} ({self.rate_text})"


def job_eta(
    *, done: int, total: int | None, started_at: datetime | None, now: datetime
) -> JobEta | None:
    """The pace of a job that has done `done` of `total` items since `started_at`; None while
    there is nothing to go by (not started, no total, nothing done yet) or nothing left."""
    if started_at is None or not total or done <= 0 or done >= total:
        return None
    elapsed = (now - started_at).total_seconds()
    if elapsed <= 0:
        return None
    rate = done / elapsed
    return JobEta(rate=rate, seconds_left=(total - done) / rate)
