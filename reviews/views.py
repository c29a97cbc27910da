"""Rubric review pages: the list of generated rubrics, their generation, and the review page of
one task (its edits and re-checks are in reviews.rubric_edit_views).

Reviewers and admins only (Perm.REVIEW): the pages show judge verdicts, which experts must
never see. Starting generation needs Perm.MANAGE, like starting any grading run over a split."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from labeling.access import Perm, ProjectAccess, project_access
from labeling.forms import TaskFilterForm
from labeling.models import Job, Task
from labeling.selectors import project_domains
from reviews.forms import CriterionForm, GenerateForm
from reviews.rubric_generation import GENERATION_JOB, GenerationInvalid, rubric_generation_start
from reviews.rubric_grader import RubricSetupMissing, grader_origin, rubric_grader
from reviews.rubric_review import (
    disagreement_counts,
    generated_rubric,
    review_page,
    rubrics_browse,
)

REVIEW_PAGE = "reviews/review.html"
RUBRICS_PER_PAGE = 25


def _list_context(access: ProjectAccess, request: HttpRequest) -> dict[str, Any]:
    project = access.project
    context: dict[str, Any] = {
        "access": access,
        "project": project,
        "can_generate": access.can(Perm.MANAGE),
        "jobs": Job.objects.filter(project=project, kind=GENERATION_JOB)[:5],
        "filters": TaskFilterForm(request.GET, domains=project_domains(project=project)),
    }
    try:
        grader = rubric_grader(project=project)
    except RubricSetupMissing as missing:
        return context | {"missing": missing}
    filters = context["filters"].cleaned_data if context["filters"].is_valid() else {}
    rubrics = rubrics_browse(
        project_pk=project.pk,
        origin=grader_origin(grader),
        query=filters.get("q", ""),
        domain=filters.get("domain", ""),
        split=filters.get("split", ""),
    )
    page = Paginator(rubrics, RUBRICS_PER_PAGE).get_page(request.GET.get("page"))
    counts = disagreement_counts(rubrics=list(page.object_list), grader=grader)
    return context | {
        "grader": grader,
        "page": page,
        "rows": [(rubric, counts[rubric.pk]) for rubric in page.object_list],
    }


@require_GET
@login_required
def rubric_list(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.REVIEW)
    context = _list_context(access, request) | {"form": GenerateForm()}
    template = "reviews/rubric_list.html" + ("#rubric-table" if request.htmx else "")
    return render(request, template, context)


@require_POST
@login_required
def rubric_generate(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    form = GenerateForm(request.POST)
    if form.is_valid():
        try:
            job = rubric_generation_start(
                project=access.project,
                task_ids=form.cleaned_data["task_ids"],
                split=form.cleaned_data["split"],
                regenerate=form.cleaned_data["regenerate"],
                user=request.user,
            )
        except (RubricSetupMissing, GenerationInvalid) as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("job-detail", job_id=job.pk)
    context = _list_context(access, request) | {"form": form}
    return render(request, "reviews/rubric_list.html", context, status=400)


def _task_or_404(access: ProjectAccess, task_id: str) -> Task:
    task = Task.objects.filter(project=access.project, external_id=task_id).first()
    if task is None:
        raise Http404
    return task


@require_GET
@login_required
def rubric_review(request: HttpRequest, slug: str, task_id: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.REVIEW)
    task = _task_or_404(access, task_id)
    context: dict[str, Any] = {"access": access, "project": access.project, "task": task}
    try:
        grader = rubric_grader(project=access.project)
    except RubricSetupMissing as missing:
        return render(request, REVIEW_PAGE, context | {"missing": missing})
    rubric = generated_rubric(task=task, origin=grader_origin(grader))
    if rubric is None:
        return render(request, REVIEW_PAGE, context | {"grader": grader, "no_rubric": True})
    context |= review_page(rubric=rubric, grader=grader)
    edit_key = request.GET.get("edit")
    if edit_key is not None:
        context |= {"edit_key": edit_key, "form": CriterionForm.for_criterion(rubric, edit_key)}
    return render(request, REVIEW_PAGE, context)
