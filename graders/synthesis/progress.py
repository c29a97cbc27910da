"""How far a synthesis run is: its cells finished (failed, kept, or vetoed on the last retry)
of all, and an estimate of the time left."""

from dataclasses import dataclass

from graders.models import SynthesisRun
from labeling.models import DrawOutcome, SynthesisCell, SynthesisDraw


@dataclass(frozen=True)
class CellsCounts:
    total: int
    done: int
    kept: int
    failed: int


def cells_counts(run: SynthesisRun) -> CellsCounts:
    """Three counting queries, whatever the run's size."""
    cells = SynthesisCell.objects.filter(synthesis_id=run.synthesis_id)
    kept = cells.filter(draws__outcome=DrawOutcome.KEPT).distinct().count()
    failed = cells.exclude(error="").count()
    # A draw at the last retry exists only after every earlier one was vetoed.
    exhausted = (
        SynthesisDraw.objects.filter(
            cell__synthesis_id=run.synthesis_id, cell__error="", retry__gte=run.retries
        )
        .exclude(outcome__in=[DrawOutcome.PENDING, DrawOutcome.KEPT])
        .values("cell")
        .distinct()
        .count()
    )
    total = cells.count()
    return CellsCounts(
        total=total, done=min(total, kept + failed + exhausted), kept=kept, failed=failed
    )


def time_left(
    done: int, left: int, seconds: float, *, minutes_from: float = 90, hours_from: float = 5400
) -> str:
    """ "about N min left" from a pass's pace (`done` units in `seconds`), in seconds below
    `minutes_from` seconds left, in hours from `hours_from`; "" before a first unit has finished,
    or when nothing is left."""
    if done <= 0 or left <= 0 or seconds <= 0:
        return ""
    remaining = left * seconds / done
    if remaining < minutes_from:
        return f"about {max(1, round(remaining))} s left"
    if remaining < hours_from:
        return f"about {round(remaining / 60)} min left"
    return f"about {remaining / 3600:.1f} h left"


def eta_text(*, done: int, left: int, seconds: float) -> str:
    """ " · about N min left" for a run's stage (time_left), or "" before a first cell has
    finished."""
    text = time_left(done, left, seconds)
    return f" · {text}" if text else ""
