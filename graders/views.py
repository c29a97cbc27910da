"""Pages of the grading side: graders and their programs, grading runs with their
evaluation and traces, and the meta-evaluation of judges. Reviewers and admins see them;
experts do not, so that judge opinions never reach a labeler."""

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from graders.aliases import alias_panel
from graders.charts import scatter_svg
from graders.drift import grader_drift_warnings
from graders.engine.programs import KINDS
from graders.evaluation import meta_eval_rows
from graders.forms import ResumeBudgetForm, RunForm
from graders.grading import grading_run_resume
from graders.models import (
    Grade,
    GradingRun,
    Metagrader,
)
from graders.program_diff import program_diff, program_steps, reward_text
from graders.reward_distribution import reward_distribution_panel
from graders.selectors import program_lineage
from graders.services import RunInvalid, grader_selected, grading_run_start
from labeling.access import Perm, ProjectAccess, project_access
from labeling.models import Job, Project, Provider

GRADES_PER_PAGE = 50
FACTOR_LABELS = {
    "tie_rate": "Tie rate",
    "distinct_scores": "Distinct scores",
    "leniency": "Leniency (mean score)",
}
LIST_PAGE = 50  # graders per page
RUNS_PAGE = 20


@require_http_methods(["GET", "POST"])
@login_required
def graders_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    form = RunForm(request.POST or None, project=access.project)
    started = start_from_form(
        request,
        slug,
        form,
        start=lambda: grading_run_start(
            project=access.project,
            metagrader=form.cleaned_data["grader"],
            endpoint=form.cleaned_data["endpoint"],
            split=form.cleaned_data["split"],
            max_calls=form.cleaned_data["max_calls"],
            max_cost=form.cleaned_data["max_cost"],
            user=request.user,
        ),
        invalid=RunInvalid,
        then=lambda run: redirect("grading-run", slug=slug, run_id=run.pk),
    )
    if started is not None:
        return started
    context = {
        "access": access,
        "project": access.project,
        "graders": Paginator(
            Metagrader.objects.filter(project=access.project).order_by("-created_at", "-pk"),
            LIST_PAGE,
        ).get_page(request.GET.get("graders_page")),
        "selected": [
            selection
            for kind in KINDS
            if (selection := grader_selected(project=access.project, kind=kind))
        ],
        "runs": Paginator(
            GradingRun.objects.filter(project=access.project)
            .select_related("metagrader", "endpoint", "job")
            .order_by("-pk"),
            RUNS_PAGE,
        ).get_page(request.GET.get("runs_page")),
        "form": form,
    }
    return render(request, "graders/graders.html", context, status=400 if form.errors else 200)


@require_GET
@login_required
def program_page(request: HttpRequest, slug: str, grader_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    grader = (
        Metagrader.objects.select_related("parent", "created_by")
        .filter(project=access.project, pk=grader_id)
        .first()
    )
    if grader is None:
        raise Http404
    context = {
        "access": access,
        "project": access.project,
        "grader": grader,
        "can_manage": access.can(Perm.MANAGE),
        "can_export": access.can(Perm.EXPORT),
        "steps": program_steps(grader.program),
        "reward": reward_text(grader.program),
        "diff": program_diff(grader.parent.program, grader.program) if grader.parent else [],
        **program_lineage(grader),
        **alias_panel(metagrader=grader),
        **reward_distribution_panel(grader=grader),
        "drift_warnings": grader_drift_warnings(grader=grader),
    }
    return render(request, "graders/program.html", context)


def _run_get(project: Project, run_id: int) -> GradingRun:
    run = (
        GradingRun.objects.select_related("metagrader", "endpoint", "job")
        .filter(project=project, pk=run_id)
        .first()
    )
    if run is None:
        raise Http404
    return run


@require_GET
@login_required
def run_page(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """The run, its evaluation and grades; with htmx, the part that changes while it runs
    (polled by the page until the run stops)."""
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    return _run_render(request, access, _run_get(access.project, run_id))


def _run_render(
    request: HttpRequest,
    access: ProjectAccess,
    run: GradingRun,
    resume_form: ResumeBudgetForm | None = None,
    status: int = 200,
) -> HttpResponse:
    grades = (
        Grade.objects.filter(run=run)
        .select_related("response__task")
        .order_by("response__task__external_id", "response__external_id")
    )
    page = Paginator(
        grades.only(
            "pk", "reward", "error", "response__external_id", "response__task__external_id"
        ),
        GRADES_PER_PAGE,
    ).get_page(request.GET.get("page"))
    context = {
        "access": access,
        "project": access.project,
        "run": run,
        "page": page,
        "job": run.job,
        "resumable": run.job.status in Job.RESUMABLE,
        "resume_form": resume_form or ResumeBudgetForm(limits=run, spent=run.usage),
    }
    fragment = "#run-live" if request.htmx and status == 200 else ""
    return render(request, f"graders/run.html{fragment}", context, status=status)


@require_GET
@login_required
def trace_page(request: HttpRequest, slug: str, grade_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    grade = (
        Grade.objects.select_related("response", "run__metagrader")
        .filter(run__project=access.project, pk=grade_id)
        .first()
    )
    if grade is None:
        raise Http404
    return render(
        request, "graders/trace.html", {"access": access, "project": access.project, "grade": grade}
    )


@require_GET
@login_required
def meta_eval_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    reference = request.GET.get("reference", Provider.SYNTHETIC)
    if reference not in Provider.values:
        raise Http404("Unknown reference provider.")
    report = meta_eval_rows(project=access.project, reference=reference)
    points = [{"label": r["judge"], **r} for r in report["rows"]]
    context = {
        "access": access,
        "project": access.project,
        "report": report,
        "references": Provider.values,
        "factors": [
            {**f, "label": FACTOR_LABELS[f["factor"]]} for f in report["correlations"]["factors"]
        ],
        "chart": scatter_svg(
            points,
            x_key="tie_rate",
            y_key="accuracy",
            x_label="Tie rate",
            y_label="Accuracy",
            title="Accuracy against tie rate",
        ),
    }
    return render(request, "graders/meta_eval.html", context)


@require_POST
@login_required
def run_resume(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """Resume a stopped run, with its budget raised or kept (graders.forms.ResumeBudgetForm)."""
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    run = _run_get(access.project, run_id)
    return resume_with_budget(
        request,
        run,
        spent=run.usage,
        resume=lambda **budget: grading_run_resume(run=run, **budget),
        rerender=lambda form: _run_render(request, access, run, resume_form=form, status=400),
        back=redirect("grading-run", slug=slug, run_id=run.pk),
        stopped_only="Only a stopped run (cancelled, failed or out of budget) resumes.",
        resumed="Resumed: finished tasks and cached judge answers are kept.",
    )


def start_from_form(
    request: HttpRequest,
    slug: str,
    form: forms.Form,
    *,
    start: Callable[[], Any],
    invalid: type[Exception],
    then: Callable[[Any], HttpResponse],
) -> HttpResponse | None:
    """A list page's start form on a POST: the MANAGE check, then `start()` when the form is
    valid and `then` with what it started. None when the page is to be rendered: a GET, or the
    form with its errors (an `invalid` error from `start` is added to them)."""
    if request.method != "POST":
        return None
    project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    if not form.is_valid():
        return None
    try:
        started = start()
    except invalid as exc:
        form.add_error(None, str(exc))
        return None
    return then(started)


def resume_with_budget(
    request: HttpRequest,
    row: Any,
    *,
    spent: dict[str, float],
    resume: Callable[..., None],
    rerender: Callable[[ResumeBudgetForm], HttpResponse],
    back: HttpResponse,
    stopped_only: str,
    resumed: str,
) -> HttpResponse:
    """A resume view's body, for a job's owner `row` (a grading run, search, synthesis run or
    sweep): `back` with the `stopped_only` note unless its job is stopped; else the POSTed
    budget (graders.forms.ResumeBudgetForm, against `spent`) `rerender`ed when invalid, or
    `resume`d with it and `back` with the `resumed` note."""
    if row.job.status not in Job.RESUMABLE:
        messages.info(request, stopped_only)
        return back
    form = ResumeBudgetForm(request.POST, limits=row, spent=spent)
    if not form.is_valid():
        return rerender(form)
    resume(**form.cleaned_data)
    messages.success(request, resumed)
    return back
