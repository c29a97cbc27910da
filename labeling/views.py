"""Pages. Each view parses, calls one service or selector, and renders; htmx requests get the
named partial of the same template."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    StreamingHttpResponse,
)
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labeling.access import Perm, job_access, project_access
from labeling.exports import EXPORT_KINDS, export_records
from labeling.forms import ImportForm, SplitForm, TaskFilterForm
from labeling.import_jobs import UploadTooLarge, import_upload, rejection_payload
from labeling.import_reference import SAMPLE_NAME, SAMPLE_PATH, import_reference
from labeling.imports import ImportRejected
from labeling.job_words import status_words
from labeling.jobs import job_cancel
from labeling.jobs_list import JobFilterForm, job_rows, job_starters, jobs_filtered, jobs_visible
from labeling.jsonl import jsonl_lines
from labeling.models import Job, Project, Task
from labeling.next_steps import next_step
from labeling.notifications import notifications_mark_read, notifications_of
from labeling.overview_panels import overview_alerts
from labeling.selectors import (
    memberships_for_user,
    project_domains,
    project_overview,
    split_table,
    task_detail,
    tasks_browse,
)
from labeling.snapshots import label_export_record, snapshot_header
from labeling.splits import SplitFractionsInvalid, SplitPlan, splits_apply, splits_plan

TASKS_PER_PAGE = 25
JOBS_PER_PAGE = 25
NOTIFICATIONS_PER_PAGE = 20


@require_GET
@login_required
def project_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "labeling/project_list.html",
        {"memberships": memberships_for_user(user=request.user)},
    )


@require_GET
@login_required
def project_overview_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug)
    context = {
        "access": access,
        "project": access.project,
        "overview": project_overview(project=access.project),
        "alerts": overview_alerts(access),
        "next_step": next_step(access, request.user),
    }
    return render(request, "labeling/project_overview.html", context)


@require_GET
@login_required
def task_list(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug)
    form = TaskFilterForm(request.GET, domains=project_domains(project=access.project))
    filters: dict[str, str] = form.cleaned_data if form.is_valid() else {}
    tasks = tasks_browse(
        project=access.project,
        query=filters.get("q", ""),
        domain=filters.get("domain", ""),
        split=filters.get("split", ""),
    )
    page = Paginator(tasks, TASKS_PER_PAGE).get_page(request.GET.get("page"))
    template = "labeling/task_list.html"
    if request.htmx:
        template += "#task-table"
    context = {
        "access": access,
        "project": access.project,
        "form": form,
        "page": page,
    }
    return render(request, template, context)


@require_GET
@login_required
def task_page(request: HttpRequest, slug: str, task_id: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug)
    try:
        detail = task_detail(
            project=access.project, external_id=task_id, with_sources=access.can(Perm.SEE_SOURCES)
        )
    except Task.DoesNotExist:
        raise Http404 from None
    return render(
        request,
        "labeling/task_detail.html",
        {"access": access, "project": access.project, **detail},
    )


@require_http_methods(["GET", "POST"])
@login_required
def import_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.IMPORT)
    form = ImportForm(request.POST or None, request.FILES or None)
    context: dict[str, Any] = {
        "access": access,
        "project": access.project,
        "form": form,
        "reference": import_reference(),
    }
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            outcome = import_upload(
                project=access.project, user=request.user, upload=upload, size=upload.size
            )
        except ImportRejected as exc:
            context["rejection"] = rejection_payload(exc)
            return render(request, "labeling/import.html", context, status=400)
        except UploadTooLarge as exc:
            form.add_error("file", str(exc))
            return render(request, "labeling/import.html", context, status=400)
        if isinstance(outcome, Job):
            return redirect("job-detail", job_id=outcome.pk)
        messages.success(request, outcome.summary())
        return redirect("project-overview", slug=slug)
    return render(request, "labeling/import.html", context, status=400 if form.errors else 200)


@require_GET
@login_required
def import_sample(request: HttpRequest, slug: str) -> HttpResponseBase:
    """A small file in the import format with every kind of labeling record, to start from."""
    project_access(user=request.user, slug=slug, perm=Perm.IMPORT)
    return FileResponse(
        SAMPLE_PATH.open("rb"),
        as_attachment=True,
        filename=SAMPLE_NAME,
        content_type="application/jsonl",
    )


@require_GET
@login_required
def export_download(request: HttpRequest, slug: str) -> HttpResponseBase:
    access = project_access(user=request.user, slug=slug, perm=Perm.EXPORT)
    kind = request.GET.get("kind", "labels")
    if kind not in EXPORT_KINDS:
        return HttpResponseBadRequest(
            f"Unknown export kind {kind[:40]!r}; use one of: {', '.join(EXPORT_KINDS)}.",
            content_type="text/plain; charset=utf-8",
        )
    export = label_export_record(project=access.project, kind=kind, user=request.user)
    records = export_records(project=access.project, kind=kind)
    response = StreamingHttpResponse(jsonl_lines(records), content_type="application/x-ndjson")
    response["Content-Disposition"] = (
        f'attachment; filename="{slug}-{kind}-snapshot-{export.snapshot_id}.jsonl"'
    )
    response["X-Label-Snapshot"] = snapshot_header(export)
    return response


@require_http_methods(["GET", "POST"])
@login_required
def splits_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug)
    domains = project_domains(project=access.project)
    form = SplitForm(request.POST or None, domains=domains)
    context: dict[str, Any] = {"access": access, "project": access.project, "form": form}
    status = 200
    if request.method == "POST":
        # Two steps: a POST without a confirmation shows what would move; the preview's form
        # posts again with the plan's token, and only a token equal to the plan made anew
        # (nothing changed in between) writes it.
        project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
        plan = _split_plan(access.project, form)
        confirm = request.POST.get("confirm")
        if plan is not None and plan.moved and confirm == plan.token:
            splits_apply(plan=plan)
            messages.success(request, f"Splits assigned: {plan.moved} of {plan.tasks} tasks moved.")
            return redirect("splits", slug=slug)
        context |= {"plan": plan, "stale": plan is not None and confirm is not None}
        status = 400 if plan is None else 200
    context["table"] = split_table(project=access.project)
    return render(request, "labeling/splits.html", context, status=status)


def _split_plan(project: Project, form: SplitForm) -> SplitPlan | None:
    """The form's plan, or None with the problem added to the form."""
    if not form.is_valid():
        return None
    try:
        return splits_plan(
            project=project,
            fractions=form.fractions(),
            seed=form.cleaned_data["seed"],
            holdout_domains=tuple(form.cleaned_data["holdout"]),
        )
    except SplitFractionsInvalid as exc:
        form.add_error(None, str(exc))
        return None


@require_GET
@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job, access = job_access(user=request.user, job_id=job_id)
    context = {"job": job, "project": job.project, "access": access}
    context["status_words"] = status_words(job, now=timezone.now())
    if request.htmx:
        # The status alone, polled by this page or shown inside the page of the job's run,
        # search or audit: Cancel brings the user back to that page. Once the job stopped,
        # the top bar's notifications badge looks again (it may have news of this job).
        context["back_to"] = request.htmx.current_url
        response = render(request, "labeling/job_detail.html#job-status", context)
        if not job.is_active:
            response["HX-Trigger"] = "job-stopped"
        return response
    context["title"] = job.kind.replace("_", " ").capitalize()
    context["owner"] = _job_owner(job)
    return render(request, "labeling/job_detail.html", context)


# The pages of what a job runs for: (the Job's reverse accessor, what to call it, its URL name).
_JOB_OWNERS = (
    ("grading_run", "grading run", "grading-run"),
    ("search_run", "search", "search"),
    ("audit_run", "audit", "audit"),
    ("synthesis_run", "synthesis run", "synthesis-run"),
    ("synthesis_sweep", "evaluator sweep", "synthesis-sweep"),
)


def _job_owner(job: Job) -> tuple[str, str] | None:
    """The name and address of the run, search or audit the job belongs to, if any."""
    if job.project is None:
        return None
    for accessor, label, url_name in _JOB_OWNERS:
        owner = getattr(job, accessor, None)  # a missing reverse one-to-one is an AttributeError
        if owner is not None:
            url = reverse(url_name, args=[job.project.slug, owner.pk])
            return f"{label} #{owner.pk}", url
    return None


@require_POST
@login_required
def job_cancel_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job, _ = job_access(user=request.user, job_id=job_id, cancel=True)
    job_cancel(job=job, by=request.user)
    back_to = request.POST.get("next", "")
    if back_to and url_has_allowed_host_and_scheme(
        back_to, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(back_to)
    return redirect("job-detail", job_id=job.pk)


@require_GET
@login_required
def jobs_page(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """The jobs of a project (`slug`), or of every project the user is in: filtered, newest
    first. Whoever may open a job's page sees it here."""
    access = project_access(user=request.user, slug=slug) if slug is not None else None
    project = access.project if access is not None else None
    visible = jobs_visible(user=request.user, project=project)
    form = JobFilterForm(request.GET, starters=job_starters(visible))
    jobs = jobs_filtered(visible, filters=form.filters())
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    template = "labeling/jobs.html"
    if request.htmx:
        template += "#job-table"
    context = {
        "access": access,
        "project": project,
        "form": form,
        "page": page,
        "rows": job_rows(list(page.object_list), now=timezone.now()),
    }
    return render(request, template, context)


@require_GET
@login_required
def notifications_page(request: HttpRequest) -> HttpResponse:
    """The user's notifications, newest first; those shown are read from then on (they keep
    their unread mark on this showing)."""
    page = Paginator(notifications_of(user=request.user), NOTIFICATIONS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    shown = list(page.object_list)
    notifications_mark_read(user=request.user, ids=[n.pk for n in shown if n.read_at is None])
    return render(request, "labeling/notifications.html", {"page": page, "shown": shown})


@require_POST
@login_required
def notifications_read_all(request: HttpRequest) -> HttpResponse:
    marked = notifications_mark_read(user=request.user)
    messages.success(request, f"{marked} notification{'' if marked == 1 else 's'} marked read.")
    return redirect("notifications")


@require_GET
def notifications_badge(request: HttpRequest) -> HttpResponse:
    """The top bar's badge alone, for its polling (the count comes from the context processor
    labeling.notification_badge). After a logout elsewhere: 204, which htmx leaves unswapped
    (a login redirect would put the login page into the top bar)."""
    if not request.user.is_authenticated:
        return HttpResponse(status=204)
    return render(request, "labeling/_notifications_badge.html")
