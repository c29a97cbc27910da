"""Pages of the blind rubric audit: start one, follow it, read its report and its flagged
criteria, open the auditor's exchange for one verdict. Reviewers and admins (Perm.REVIEW)
see and start audits; experts do not, so the auditor's opinion of their rubrics never reaches
a labeler."""

import re
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from graders.engine.audit import GROUNDINGS, SPECIFICITIES
from graders.forms import budget_fields
from graders.models import JudgeEndpoint
from labeling.access import Perm, ProjectAccess, project_access
from labeling.jobs import job_cancel
from labeling.models import AuthorKind, Job, Split
from reviews.audit import (
    AuditInvalid,
    audit_domains,
    audit_flagged,
    audit_report,
    audit_resume,
    audit_start,
)
from reviews.models import AuditRun, AuditVerdict

FLAGGED_PER_PAGE = 25
STATUS_FRAGMENT, REPORT_FRAGMENT, FLAGGED_FRAGMENT = "audit-status", "audit-report", "audit-flagged"
# Sent when the polled status sees the audit stop, so the report refreshes one last time.
FINISHED_EVENT = "audit-finished"
# Task ids may hold spaces (they are the importer's strings), so only lines and commas split.
TASK_ID_SEPARATORS = re.compile(r"[\r\n,]+")


class AuditForm(forms.Form):
    endpoint = forms.ModelChoiceField(queryset=JudgeEndpoint.objects.none(), label="Auditor")
    split = forms.ChoiceField(
        required=False,
        choices=[("", "(chosen tasks)")] + [(s, s) for s in Split.values if s != "unassigned"],
    )
    task_ids = forms.CharField(
        required=False,
        label="Task ids",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Instead of a split: task ids, one per line or separated by commas.",
    )
    max_calls, max_cost = budget_fields(
        calls_help="Stop after this many judge calls.", cost_max=None
    )

    def __init__(self, *args: Any, project: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        endpoints = JudgeEndpoint.objects.filter(project=project)
        self.fields["endpoint"].queryset = endpoints  # type: ignore[attr-defined]
        default = endpoints.filter(is_default=True).first()
        if default is not None:
            self.fields["endpoint"].initial = default.pk

    def clean_task_ids(self) -> list[str]:
        ids = (t.strip() for t in TASK_ID_SEPARATORS.split(self.cleaned_data["task_ids"]))
        return [t for t in ids if t]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if bool(data.get("split")) == bool(data.get("task_ids")):
            raise forms.ValidationError("Choose a split or list task ids (one of the two).")
        return data


class FlaggedFilterForm(forms.Form):
    author = forms.ChoiceField(required=False, choices=[("", "any author"), *AuthorKind.choices])
    grounding = forms.ChoiceField(
        required=False, choices=[("", "any grounding"), *((g, g) for g in GROUNDINGS)]
    )
    specificity = forms.ChoiceField(
        required=False, choices=[("", "any specificity"), *((s, s) for s in SPECIFICITIES)]
    )
    omission = forms.NullBooleanField(
        required=False,
        widget=forms.Select(
            choices=[("", "omission: any"), ("true", "omission-prone"), ("false", "not")]
        ),
    )
    domain = forms.ChoiceField(required=False)

    def __init__(self, *args: Any, domains: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["domain"].choices = [("", "any domain"), *((d, d) for d in domains)]  # type: ignore[attr-defined]


@require_http_methods(["GET", "POST"])
@login_required
def audits_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.REVIEW)
    form = AuditForm(request.POST or None, project=access.project)
    if request.method == "POST" and form.is_valid():
        try:
            run = audit_start(project=access.project, user=request.user, **form.cleaned_data)
        except AuditInvalid as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("audit", slug=slug, audit_id=run.pk)
    context = {
        "access": access,
        "project": access.project,
        "form": form,
        "audits": AuditRun.objects.filter(project=access.project).select_related(
            "job", "endpoint", "created_by"
        ),
    }
    return render(request, "reviews/audits.html", context, status=400 if form.errors else 200)


@require_GET
@login_required
def audit_page(request: HttpRequest, slug: str, audit_id: int) -> HttpResponse:
    """The full page, or the fragment htmx asks for: the status every second, the report (the
    shares of one domain or all, and the flagged list) when the audit moves or the domain
    changes, the flagged list alone when it is filtered or paged."""
    access = project_access(user=request.user, slug=slug, perm=Perm.REVIEW)
    run = _audit_get(access, audit_id)
    target = request.htmx.target if request.htmx else None
    context = {
        "access": access,
        "project": access.project,
        "run": run,
        "job": run.job,
        "resumable": run.job.status in Job.RESUMABLE,
    }
    # The report's bootstrap takes a while on big audits: the status, polled every second,
    # and the flagged list, paged and filtered on its own, are rendered without it.
    if target != STATUS_FRAGMENT:
        context |= _flagged_context(request, run)
    if target not in (STATUS_FRAGMENT, FLAGGED_FRAGMENT):
        context["report"] = audit_report(run=run, domain=context["domain"])
    template = "reviews/audit.html"
    if target in (STATUS_FRAGMENT, REPORT_FRAGMENT, FLAGGED_FRAGMENT):
        template += f"#{target}"
    response = render(request, template, context)
    if target == STATUS_FRAGMENT and not run.job.is_active:
        trigger_client_event(response, FINISHED_EVENT)
    return response


@require_POST
@login_required
def audit_cancel(request: HttpRequest, slug: str, audit_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.REVIEW)
    run = _audit_get(access, audit_id)
    job_cancel(job=run.job, by=request.user)
    messages.info(request, "Cancel requested: the audit stops after the criteria in flight.")
    return redirect("audit", slug=slug, audit_id=run.pk)


@require_POST
@login_required
def audit_resume_view(request: HttpRequest, slug: str, audit_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.REVIEW)
    run = _audit_get(access, audit_id)
    if run.job.status in Job.RESUMABLE:
        audit_resume(run=run)
        messages.success(request, "Resumed: verdicts so far and cached judge answers are kept.")
    return redirect("audit", slug=slug, audit_id=run.pk)


@require_GET
@login_required
def audit_verdict_page(
    request: HttpRequest, slug: str, audit_id: int, verdict_id: int
) -> HttpResponse:
    """Exactly what the auditor was sent and what it answered, for one criterion."""
    access = project_access(user=request.user, slug=slug, perm=Perm.REVIEW)
    run = _audit_get(access, audit_id)
    verdict = AuditVerdict.objects.select_related("task").filter(run=run, pk=verdict_id).first()
    if verdict is None:
        raise Http404
    context = {"access": access, "project": access.project, "run": run, "verdict": verdict}
    return render(request, "reviews/audit_verdict.html", context)


def _flagged_context(request: HttpRequest, run: AuditRun) -> dict[str, Any]:
    """The page of flagged criteria under the filters in the query, and the domain chosen."""
    filters = FlaggedFilterForm(request.GET, domains=audit_domains(run=run))
    chosen = filters.cleaned_data if filters.is_valid() else {}
    flagged = audit_flagged(run=run, **chosen)
    return {
        "filters": filters,
        "domain": chosen.get("domain", ""),
        "page": Paginator(flagged, FLAGGED_PER_PAGE).get_page(request.GET.get("page")),
    }


def _audit_get(access: ProjectAccess, audit_id: int) -> AuditRun:
    run = (
        AuditRun.objects.select_related("job", "endpoint", "created_by")
        .filter(project=access.project, pk=audit_id)
        .first()
    )
    if run is None:
        raise Http404
    return run
