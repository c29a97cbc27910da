"""The synthesis run pages: start one (admins), list them, follow one (its job's progress and
its cells), cancel, resume, and the harness mode's job export and trajectory import. Admins
and reviewers see them (they show levels, votes and agents, which experts never do); only
admins see steering text or change anything."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from graders.forms import ResumeBudgetForm
from graders.models import JudgeEndpoint, RolloutMode, SynthesisRun
from graders.synthesis.forms import HarnessImportForm, SynthesisForm
from graders.synthesis.harness import harness_import, harness_jobs, harness_jobs_jsonl
from graders.synthesis.progress import cells_counts
from graders.synthesis.runs import (
    SynthesisInvalid,
    synthesis_cancel,
    synthesis_resume,
    synthesis_start,
)
from graders.synthesis.selectors import cells_page, runs_list, syntheses_page
from graders.views import resume_with_budget, start_from_form
from labeling.access import Perm, ProjectAccess, project_access
from labeling.imports import ImportRejected
from labeling.models import Job

STATUS_FRAGMENT, CELLS_FRAGMENT = "synthesis-status", "synthesis-cells"
FINISHED_EVENT = "synthesis-finished"


@require_http_methods(["GET", "POST"])
@login_required
def synthesis_runs_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    form = SynthesisForm(request.POST or None, project=access.project)
    started = start_from_form(
        request,
        slug,
        form,
        start=lambda: synthesis_start(
            project=access.project, user=request.user, **form.start_arguments()
        ),
        invalid=SynthesisInvalid,
        then=lambda run: redirect("synthesis-run", slug=slug, run_id=run.pk),
    )
    if started is not None:
        return started
    syntheses, synthesis_rows = syntheses_page(
        project=access.project, page=request.GET.get("syntheses_page")
    )
    context = {
        "access": access,
        "project": access.project,
        "can_manage": access.can(Perm.MANAGE),
        "has_endpoints": JudgeEndpoint.objects.filter(project=access.project).exists(),
        "runs": runs_list(project=access.project, page=request.GET.get("page")),
        "syntheses": syntheses,
        "synthesis_rows": synthesis_rows,
        "form": form,
    }
    status = 400 if form.errors else 200
    return render(request, "graders/synthesis_list.html", context, status=status)


@require_GET
@login_required
def synthesis_run_page(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """The page, or the fragment htmx asks for: the status (polled every second while the job
    runs) or the cells table (its pages, and once more when the status sees the job stop)."""
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    run = _run_get(access, run_id)
    target = request.htmx.target if request.htmx else None
    fragment = target if target in (STATUS_FRAGMENT, CELLS_FRAGMENT) else None
    response = _run_render(request, access, run, fragment=fragment)
    if fragment == STATUS_FRAGMENT and not run.job.is_active:
        trigger_client_event(response, FINISHED_EVENT)
    return response


@require_POST
@login_required
def synthesis_run_cancel(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    run = _run_get(access, run_id)
    synthesis_cancel(run=run, by=request.user)
    messages.info(request, "Cancel requested: the run stops before its next call.")
    return redirect("synthesis-run", slug=slug, run_id=run.pk)


@require_POST
@login_required
def synthesis_run_resume(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    run = _run_get(access, run_id)
    return resume_with_budget(
        request,
        run,
        spent=run.usage,
        resume=lambda **budget: synthesis_resume(run=run, **budget),
        rerender=lambda form: _run_render(request, access, run, resume_form=form, status=400),
        back=redirect("synthesis-run", slug=slug, run_id=run.pk),
        stopped_only="Only a stopped run (cancelled, failed or out of budget) resumes.",
        resumed="Resumed: stored steering, rollouts and votes are kept.",
    )


@require_GET
@login_required
def harness_jobs_download(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    run = _run_get(access, run_id, mode=RolloutMode.HARNESS)
    response = StreamingHttpResponse(
        harness_jobs_jsonl(run=run), content_type="application/x-ndjson"
    )
    name = f"{run.synthesis.external_id}-jobs.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_POST
@login_required
def harness_trajectories_upload(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    run = _run_get(access, run_id, mode=RolloutMode.HARNESS)
    form = HarnessImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return _run_render(request, access, run, import_form=form, status=400)
    try:
        stored = harness_import(run=run, lines=form.cleaned_data["file"])
    except ImportRejected as exc:
        return _run_render(request, access, run, import_form=form, rejected=exc, status=400)
    messages.success(request, f"{stored} trajectories stored; the run goes on to the cascade.")
    return redirect("synthesis-run", slug=slug, run_id=run.pk)


def _run_get(access: ProjectAccess, run_id: int, mode: str | None = None) -> SynthesisRun:
    run = (
        SynthesisRun.objects.select_related("job", "synthesis", "writer", "user_simulator")
        .filter(project=access.project, pk=run_id)
        .first()
    )
    if run is None or (mode is not None and run.mode != mode):
        raise Http404
    return run


def _run_render(
    request: HttpRequest,
    access: ProjectAccess,
    run: SynthesisRun,
    *,
    fragment: str | None = None,
    resume_form: ResumeBudgetForm | None = None,
    import_form: HarnessImportForm | None = None,
    rejected: ImportRejected | None = None,
    status: int = 200,
) -> HttpResponse:
    can_manage = access.can(Perm.MANAGE)
    context: dict[str, Any] = {
        "access": access,
        "project": access.project,
        "can_manage": can_manage,
        "run": run,
        "job": run.job,
        "counts": cells_counts(run),
        "resumable": run.job.status in Job.RESUMABLE,
        "resume_form": resume_form or ResumeBudgetForm(limits=run, spent=run.usage),
    }
    if fragment != STATUS_FRAGMENT:
        cells, rows = cells_page(run=run, page=request.GET.get("page"), with_steering=can_manage)
        context |= {
            "cells": cells,
            "rows": rows,
            "cascade": [j.endpoint for j in run.cascade.select_related("endpoint")],
            "agents": list(run.agents.all()),
            "dimensions": list(run.dimensions.all()),
        }
        if run.mode == RolloutMode.HARNESS and can_manage:
            context |= {
                "open_jobs": len(harness_jobs(run=run)),
                "import_form": import_form or HarnessImportForm(),
                "rejected": rejected,
            }
    template = "graders/synthesis_run.html" + (f"#{fragment}" if fragment else "")
    return render(request, template, context, status=status)
