"""The pace of a job and its status in words, against figures worked out by hand."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User

from labeling.job_progress import JobEta, duration_text, job_eta
from labeling.job_words import duration_words, kind_words, status_words
from labeling.models import Job, JobStatus

START = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def test_eta_from_the_rate_observed_since_the_start() -> None:
    # 340 done in 120 s: 340/120 = 2.8333 a second; 660 left / 2.8333 = 232.94 s, about 4 min.
    eta = job_eta(done=340, total=1000, started_at=START, now=at(120))
    assert eta is not None
    assert eta.rate == pytest.approx(340 / 120)
    assert eta.seconds_left == pytest.approx(232.941, abs=1e-3)
    assert eta.left_text == "about 4 min left"
    assert eta.rate_text == "2.8 a second"
    assert str(eta) == "about 4 min left (2.8 a second)"


def test_eta_slow_and_long_jobs() -> None:
    # 3 done in 10 min: 18 an hour (the rate goes in the first unit it reaches 1 in); 97 left
    # take 97 / (3/600) = 19,400 s = 323.3 min: 5 h 23 min.
    eta = job_eta(done=3, total=100, started_at=START, now=at(600))
    assert eta is not None and eta.rate_text == "18.0 an hour"
    assert eta.left_text == "about 5 h 23 min left"
    # 30 done in 100 s: 0.3 a second, 18 a minute.
    assert JobEta(rate=30 / 100, seconds_left=0).rate_text == "18.0 a minute"
    assert JobEta(rate=1 / 7200, seconds_left=0).rate_text == "12.0 a day"
    assert JobEta(rate=1 / 3600, seconds_left=0).rate_text == "1.0 an hour"
    # 90 of 100 in 90 s: 10 left at 1 a second, 10 s.
    assert job_eta(done=90, total=100, started_at=START, now=at(90)) == JobEta(1.0, 10.0)
    assert JobEta(1.0, 10.0).left_text == "less than a minute left"


@pytest.mark.parametrize(
    ("done", "total", "started_at", "now"),
    [
        (0, 100, START, at(60)),  # nothing done yet: no rate
        (10, None, START, at(60)),  # no total
        (10, 0, START, at(60)),
        (100, 100, START, at(60)),  # nothing left
        (10, 100, None, at(60)),  # not started
        (10, 100, START, START),  # no time passed (clocks)
    ],
)
def test_no_eta_without_something_to_go_by(
    done: int, total: int | None, started_at: datetime | None, now: datetime
) -> None:
    assert job_eta(done=done, total=total, started_at=started_at, now=now) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (44.6, "45 s"), (59.4, "59 s"), (59.6, "1 min"), (89, "1 min"), (91, "2 min"),
     (3569, "59 min"), (3571, "1 h"), (3600 + 5 * 60, "1 h 5 min"), (7 * 3600, "7 h")],
)  # fmt: skip
def test_duration_text(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def job(**fields: object) -> Job:
    return Job(kind="search", **fields)  # type: ignore[arg-type]


def test_status_words() -> None:
    now = at(120)
    running = job(status=JobStatus.RUNNING, done=340, total=1000, started_at=START)
    assert status_words(running, now=now) == "Running: 340 of 1,000, about 4 min left"
    assert status_words(job(status=JobStatus.RUNNING, done=0, total=1000, started_at=START),
                        now=now) == "Running: 0 of 1,000"  # fmt: skip
    assert status_words(job(status=JobStatus.RUNNING, done=12), now=now) == "Running: 12 done"
    assert status_words(job(status=JobStatus.RUNNING), now=now) == "Running"
    stopping = job(status=JobStatus.RUNNING, done=5, total=10, cancel_requested=True)
    assert status_words(stopping, now=now) == "Cancelling: 5 of 10"
    assert status_words(job(status=JobStatus.QUEUED), now=now) == "Queued"
    assert status_words(job(status=JobStatus.SUCCEEDED), now=now) == "Succeeded"
    assert status_words(job(status=JobStatus.BUDGET_SPENT), now=now) == "Stopped: budget spent"
    failed = job(status=JobStatus.FAILED, error="ValueError: bad line 3\nTraceback (most recent)")
    assert status_words(failed, now=now) == "Failed: ValueError: bad line 3"
    assert status_words(job(status=JobStatus.FAILED, error="x" * 500), now=now) == (
        "Failed: " + "x" * 159 + "…"
    )
    assert status_words(job(status=JobStatus.FAILED), now=now) == "Failed"
    assert status_words(job(status=JobStatus.CANCELLED), now=now) == "Cancelled"
    by = job(status=JobStatus.CANCELLED, cancel_requested_by=User(username="bob"))
    assert status_words(by, now=now) == "Cancelled by bob"


def test_kind_and_duration_words() -> None:
    assert kind_words("synthesis_sweep") == "Evaluator sweep"
    assert kind_words("some_new_kind") == "Some new kind"
    finished = job(status=JobStatus.SUCCEEDED, started_at=START, finished_at=at(252))
    assert duration_words(finished, now=at(9999)) == "4 min"
    assert duration_words(job(status=JobStatus.RUNNING, started_at=START), now=at(30)) == "30 s"
    assert duration_words(job(status=JobStatus.QUEUED), now=at(30)) == ""
