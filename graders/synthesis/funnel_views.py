"""The funnel page of a synthesis (paper Tables 1, 8 and 9): reviewers and admins only, since it
names agent models and filter judges (Perm.SEE_SOURCES)."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from graders.engine.synthesis.funnel import Funnel
from graders.models import SynthesisRun
from graders.synthesis.funnel_selectors import syntheses_list, synthesis_funnel
from labeling.access import Perm, project_access
from labeling.charts import stacked_bars_svg
from labeling.demo import demo_synthesis_note

AXIS_TITLES = {
    "dimension": "By dimension",
    "domain": "By domain",
    "contrast": "By level contrast",
    "agent": "By agent model",
}


def funnel_chart(funnel: Funnel, judges: list[str]) -> str:
    """Draws per retry, split into kept, rejected by each judge and unfinished."""
    return stacked_bars_svg(
        title="Synthesis funnel",
        description="Draws per retry: kept, rejected by each filter judge, and failed or "
        "pending. The table beside it gives the same numbers.",
        series=["kept", *(f"rejected by {j}" for j in judges), "failed or pending"],
        bars=[
            (
                f"retry {row.retry}",
                [row.kept, *(row.rejected.get(j, 0) for j in judges), row.failed + row.pending],
            )
            for row in funnel.by_retry
        ],
    )


@require_GET
@login_required
def synthesis_funnel_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    syntheses = syntheses_list(project=access.project)
    context: dict[str, object] = {
        "access": access,
        "project": access.project,
        "syntheses": syntheses,
    }
    if syntheses:
        wanted = request.GET.get("synthesis")
        chosen = next((s for s in syntheses if s.external_id == wanted), None)
        if wanted is not None and chosen is None:
            raise Http404("No such synthesis in this project.")
        synthesis = chosen or syntheses[0]
        funnel = synthesis_funnel(synthesis=synthesis)
        context |= {
            "synthesis": synthesis,
            "note": demo_synthesis_note(synthesis),
            "run": SynthesisRun.objects.filter(synthesis=synthesis).first(),  # None: imported
            "funnel": funnel,
            "chart": funnel_chart(funnel, list(synthesis.judges)),
            "retry_rows": [
                (row, [row.rejected.get(j, 0) for j in synthesis.judges]) for row in funnel.by_retry
            ],
            "total_rejected": [funnel.total.rejected.get(j, 0) for j in synthesis.judges],
            "subsets": [(AXIS_TITLES[axis], rows) for axis, rows in funnel.by.items()],
        }
    return render(request, "graders/synthesis_funnel.html", context)
