"""Pages of the evaluator sweep: start one on a synthesis, follow it, read how its evaluators
rank. Reviewers and admins see them (Perm.SEE_SOURCES: evaluator names and syntheses are
not for labelers); only admins (Perm.MANAGE) start, cancel or resume."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from graders.evaluation import meta_eval_rows
from graders.forms import ResumeBudgetForm
from graders.models import SynthesisSweep
from graders.synthesis.kept_pairs import kept_draws
from graders.synthesis.sweep import SweepInvalid, sweep_resume, sweep_start
from graders.synthesis.sweep_forms import SweepForm
from graders.views import resume_with_budget, start_from_form
from labeling.access import Perm, ProjectAccess, project_access
from labeling.models import Job

SWEEPS_PAGE = 20


@require_http_methods(["GET", "POST"])
@login_required
def sweeps_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    # ?synthesis=<pk> (the run page's link) picks that synthesis in the form.
    initial = {"synthesis": request.GET.get("synthesis")} if "synthesis" in request.GET else None
    form = SweepForm(request.POST or None, project=access.project, initial=initial)
    started = start_from_form(
        request,
        slug,
        form,
        start=lambda: sweep_start(user=request.user, **form.cleaned_data),
        invalid=SweepInvalid,
        then=lambda sweep: redirect("synthesis-sweep", slug=slug, sweep_id=sweep.pk),
    )
    if started is not None:
        return started
    sweeps = SynthesisSweep.objects.filter(project=access.project).select_related(
        "job", "synthesis"
    )
    context = {
        "access": access,
        "project": access.project,
        "can_manage": access.can(Perm.MANAGE),
        "has_syntheses": access.project.syntheses.exists(),
        "has_endpoints": access.project.judge_endpoints.exists(),
        "sweeps": Paginator(sweeps, SWEEPS_PAGE).get_page(request.GET.get("page")),
        "form": form,
    }
    status = 400 if form.errors else 200
    return render(request, "graders/synthesis_sweeps.html", context, status=status)


@require_GET
@login_required
def sweep_page(request: HttpRequest, slug: str, sweep_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    return _sweep_render(request, access, _sweep_get(access, sweep_id))


@require_POST
@login_required
def sweep_resume_view(request: HttpRequest, slug: str, sweep_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    sweep = _sweep_get(access, sweep_id)
    return resume_with_budget(
        request,
        sweep,
        spent=sweep.usage,
        resume=lambda **budget: sweep_resume(sweep=sweep, **budget),
        rerender=lambda form: _sweep_render(request, access, sweep, resume_form=form, status=400),
        back=redirect("synthesis-sweep", slug=slug, sweep_id=sweep.pk),
        stopped_only="Only a stopped sweep (cancelled, failed or out of budget) resumes.",
        resumed="Resumed: the scores so far and cached judge answers are kept.",
    )


def _sweep_get(access: ProjectAccess, sweep_id: int) -> SynthesisSweep:
    sweep = (
        SynthesisSweep.objects.select_related("job", "synthesis")
        .filter(project=access.project, pk=sweep_id)
        .first()
    )
    if sweep is None:
        raise Http404("No such sweep.")
    return sweep


def _sweep_render(
    request: HttpRequest,
    access: ProjectAccess,
    sweep: SynthesisSweep,
    resume_form: ResumeBudgetForm | None = None,
    status: int = 200,
) -> HttpResponse:
    rows = {row["judge"]: row for row in meta_eval_rows(project=access.project)["rows"]}
    context: dict[str, Any] = {
        "access": access,
        "project": access.project,
        "sweep": sweep,
        "job": sweep.job,
        "pairs": kept_draws(synthesis=sweep.synthesis).count(),
        "can_manage": access.can(Perm.MANAGE),
        "evaluators": [{**e, "row": rows.get(e["name"])} for e in sweep.evaluators],
        "resumable": sweep.job.status in Job.RESUMABLE,
        "resume_form": resume_form or ResumeBudgetForm(limits=sweep, spent=sweep.usage),
    }
    template = "graders/synthesis_sweep.html"
    if request.htmx:
        template += "#sweep-live"
    return render(request, template, context, status=status)
