"""Reads for the synthesis run pages. What a reader may see is decided here: steering text is
fetched only for a reader allowed it (admins), never left to a template branch."""

from dataclasses import dataclass
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, F, Prefetch, Q

from graders.models import SynthesisRun
from labeling.demo import demo_synthesis_note
from labeling.models import DrawOutcome, Synthesis, SynthesisCell, SynthesisDraw

CELLS_PAGE = 50
SYNTHESES_PAGE = 20


@dataclass(frozen=True)
class CellRow:
    cell: SynthesisCell
    draws: list[SynthesisDraw]
    outcome: str
    steering: dict[str, str] | None


def _outcome(cell: SynthesisCell, draws: list[SynthesisDraw], retries: int) -> str:
    if cell.error:
        return "failed"
    if any(d.outcome == DrawOutcome.KEPT for d in draws):
        return "kept"
    ended = [d for d in draws if d.outcome != DrawOutcome.PENDING]
    if ended and max(d.retry for d in ended) >= retries:
        return "rejected"
    return "in progress" if draws else "waiting"


def cells_page(
    *, run: SynthesisRun, page: Any, with_steering: bool
) -> tuple[Page[Any], list[CellRow]]:
    """One page of the run's cells with their draws and votes; the steering only when
    `with_steering`."""
    fields = ["external_id", "task__external_id", "dimension__name", "low_level", "high_level",
              "agent", "error"]  # fmt: skip
    if with_steering:
        fields.append("steering")
    cells = (
        SynthesisCell.objects.filter(synthesis_id=run.synthesis_id)
        .select_related("task", "dimension")
        .only(*fields)
        .prefetch_related(
            Prefetch("draws", queryset=SynthesisDraw.objects.prefetch_related("votes"))
        )
        .order_by("external_id")
    )
    paged = Paginator(cells, CELLS_PAGE).get_page(page)
    rows = []
    for cell in paged.object_list:
        draws = list(cell.draws.all())
        steering = cell.steering if with_steering else None
        rows.append(CellRow(cell, draws, _outcome(cell, draws, run.retries), steering or None))
    return paged, rows


def runs_list(*, project: Any, page: Any) -> Page[Any]:
    runs = (
        SynthesisRun.objects.filter(project=project)
        .select_related("job", "synthesis", "writer")
        .annotate(
            cell_count=Count("synthesis__cells", distinct=True),
            kept_count=Count(
                "synthesis__cells__draws",
                filter=Q(synthesis__cells__draws__outcome=DrawOutcome.KEPT),
                distinct=True,
            ),
        )
        .order_by("-created_at", "-pk")
    )
    return Paginator(runs, 20).get_page(page)


@dataclass(frozen=True)
class SynthesisRow:
    synthesis: Synthesis
    run_id: int | None  # None for an imported synthesis
    note: str


def syntheses_page(*, project: Any, page: Any) -> tuple[Page[Any], list[SynthesisRow]]:
    """One page of the project's syntheses, generated here or imported, newest first, with
    their cell, draw and kept counts, so each reaches its funnel and validation pages."""
    syntheses = (
        Synthesis.objects.filter(project=project)
        .select_related("project")
        .annotate(
            run_pk=F("run__pk"),
            cell_count=Count("cells", distinct=True),
            draw_count=Count("cells__draws", distinct=True),
            kept_count=Count(
                "cells__draws", filter=Q(cells__draws__outcome=DrawOutcome.KEPT), distinct=True
            ),
        )
        .order_by("-created_at", "-pk")
    )
    paged = Paginator(syntheses, SYNTHESES_PAGE).get_page(page)
    rows = [SynthesisRow(s, s.run_pk, demo_synthesis_note(s)) for s in paged.object_list]
    return paged, rows
