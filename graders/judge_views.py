"""The Judges page: the project's judge endpoints, added, edited, made the default and deleted
by admins, seen by reviewers.

An endpoint that runs, searches or audits have used keeps what decides its answers (base URL,
model, temperature, max tokens, response format): those runs' grades and cached calls came
from it, so a different model is a new endpoint. Its name, key variable, concurrency, timeout
and prices can still change, and it cannot be deleted while anything refers to it."""

import functools
import operator
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.db.models import BigIntegerField, Exists, OuterRef, ProtectedError, Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from graders.forms import EndpointForm
from graders.models import GradingRun, JudgeEndpoint, SearchRun
from labeling.access import Perm, ProjectAccess, project_access
from labeling.models import Job

# What a judge call's answer depends on (and the judge cache's key with it).
ANSWER_FIELDS = ("base_url", "model", "temperature", "max_tokens", "response_format")


@require_http_methods(["GET", "POST"])
@login_required
def judges_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    form = EndpointForm(request.POST or None, project=access.project)
    if request.method == "POST":
        project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
        if form.is_valid():
            endpoint = _saved(form)
            messages.success(request, f"Judge {endpoint.name} added.")
            return redirect("judges", slug=slug)
    context = {
        "access": access,
        "project": access.project,
        "endpoints": _with_use(JudgeEndpoint.objects.filter(project=access.project)),
        "form": form,
    }
    return render(request, "graders/judges.html", context, status=400 if form.errors else 200)


def _with_use(endpoints: QuerySet[JudgeEndpoint]) -> QuerySet[JudgeEndpoint]:
    """Each endpoint with `in_use`: whether anything _uses() counts refers to it, in the same
    query, so the page offers Delete only where it can succeed."""
    referrers = (Exists(found) for found, _, _ in _referrers(OuterRef("pk")))
    return endpoints.annotate(in_use=functools.reduce(operator.or_, referrers))


def _referrers(pk: int | OuterRef) -> list[tuple[QuerySet[Any], str, str]]:
    """What refers to the endpoint `pk` (an id, or OuterRef("pk") in a subquery) and so keeps
    it, each with its name in words. Jobs name an endpoint by id in their parameters (rubric
    writing has no foreign key to protect it): those waiting or running count too, except the
    jobs of grading runs, searches and audits, which count as their run."""
    audits = JudgeEndpoint._meta.get_field("audits").related_model  # reviews' AuditRun
    jobs = Job.objects.filter(
        status__in=Job.ACTIVE,
        grading_run__isnull=True,
        search_run__isnull=True,
        audit_run__isnull=True,
    ).annotate(named=Cast(KT("params__endpoint"), BigIntegerField()))
    return [
        (GradingRun.objects.filter(endpoint=pk), "grading run", "grading runs"),
        (SearchRun.objects.filter(Q(endpoint=pk) | Q(proposer=pk)), "search", "searches"),
        (audits.objects.filter(endpoint=pk), "audit", "audits"),
        (jobs.filter(named=pk), "job at work", "jobs at work"),
    ]


@require_http_methods(["GET", "POST"])
@login_required
def judge_edit(request: HttpRequest, slug: str, endpoint_id: int) -> HttpResponse:
    access, endpoint = _endpoint(request, slug, endpoint_id)
    form = EndpointForm(request.POST or None, instance=endpoint, project=access.project)
    used = _uses(endpoint)
    if used:
        for name in ANSWER_FIELDS:
            form.fields[name].disabled = True
            form.fields[name].help_text = f"Fixed: {used} used this endpoint."
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            # Read again under a lock: a run may have started since the form was made.
            locked = JudgeEndpoint.objects.select_for_update().get(pk=endpoint.pk)
            answers_change = any(
                getattr(locked, name) != form.cleaned_data[name] for name in ANSWER_FIELDS
            )
            meanwhile = _uses(locked) if answers_change else ""
            if meanwhile:
                form.add_error(
                    None,
                    f"Not saved: {meanwhile} used this endpoint meanwhile, so its base URL, "
                    "model, temperature, max tokens and response format stay.",
                )
            else:
                _saved(form)
        if not form.errors:
            messages.success(request, f"Judge {endpoint.name} saved.")
            return redirect("judges", slug=slug)
    context = {"access": access, "project": access.project, "endpoint": endpoint, "form": form}
    return render(request, "graders/judge_edit.html", context, status=400 if form.errors else 200)


@require_POST
@login_required
def judge_default(request: HttpRequest, slug: str, endpoint_id: int) -> HttpResponse:
    access, endpoint = _endpoint(request, slug, endpoint_id)
    with transaction.atomic():
        JudgeEndpoint.objects.filter(project=access.project).update(is_default=False)
        JudgeEndpoint.objects.filter(pk=endpoint.pk).update(is_default=True)
    messages.success(request, f"Judge {endpoint.name} is now the project's default.")
    return redirect("judges", slug=slug)


@require_POST
@login_required
def judge_delete(request: HttpRequest, slug: str, endpoint_id: int) -> HttpResponse:
    _, endpoint = _endpoint(request, slug, endpoint_id)
    with transaction.atomic():
        JudgeEndpoint.objects.select_for_update().filter(pk=endpoint.pk).first()
        uses = _uses(endpoint)
        if not uses:
            try:
                endpoint.delete()
            except ProtectedError:  # something new refers to it
                uses = _uses(endpoint) or "something"
    if uses:
        messages.error(
            request,
            f"Judge {endpoint.name} was not deleted: {uses} used it, and their records name it.",
        )
    else:
        messages.success(request, f"Judge {endpoint.name} deleted.")
    return redirect("judges", slug=slug)


def _endpoint(
    request: HttpRequest, slug: str, endpoint_id: int
) -> tuple[ProjectAccess, JudgeEndpoint]:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    return access, get_object_or_404(JudgeEndpoint, pk=endpoint_id, project=access.project)


def _saved(form: EndpointForm) -> JudgeEndpoint:
    """Save the form's endpoint; a new default takes the place of the old one."""
    with transaction.atomic():
        endpoint: JudgeEndpoint = form.save(commit=False)
        if endpoint.is_default:
            others = JudgeEndpoint.objects.filter(project=endpoint.project).exclude(pk=endpoint.pk)
            others.update(is_default=False)
        endpoint.save()
    return endpoint


def _uses(endpoint: JudgeEndpoint) -> str:
    """What refers to the endpoint, in words ("3 grading runs and 1 search"); empty if nothing."""
    counts = ((found.count(), one, many) for found, one, many in _referrers(endpoint.pk))
    return " and ".join(f"{n} {one if n == 1 else many}" for n, one, many in counts if n)
