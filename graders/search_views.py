"""Pages of the metagrader search: start one, follow it, read its leaderboard, curve and
winner, evaluate a candidate on D_eval, and promote a grader. Reviewers and admins see them;
only admins (Perm.MANAGE) start, stop, resume, evaluate or promote."""

from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Max
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from graders.active.panel import which_wins_panel
from graders.active.services import WhichWinsUnavailable, which_wins_queue
from graders.candidates import candidates_ranked
from graders.charts import curve_svg, curve_warning
from graders.forms import ResumeBudgetForm, SearchForm
from graders.models import Candidate, GradingRun, JudgeEndpoint, Metagrader, SearchRun
from graders.research import research_comparison
from graders.search import (
    SearchInvalid,
    candidate_eval_start,
    search_judge_usage,
    search_resume,
    search_start,
    search_usage,
    selection_problem,
)
from graders.services import grader_promote, grader_selected
from graders.views import resume_with_budget, start_from_form
from labeling.access import Perm, ProjectAccess, project_access
from labeling.jobs import job_cancel
from labeling.models import Job

STATUS_FRAGMENT, RESULTS_FRAGMENT = "search-status", "search-results"
# Sent when the polled status sees the search stop, so the results refresh one last time.
FINISHED_EVENT = "search-finished"
SEARCHES_PAGE = 20
WINNER_METRICS = (
    ("tolerant_ranking_accuracy", "Tolerant ranking accuracy"),
    ("ranking_accuracy", "Ranking accuracy"),
    ("harm_aware_accuracy", "Harm-aware accuracy"),
    ("within_task_spearman", "Within-task Spearman"),
)


@require_http_methods(["GET", "POST"])
@login_required
def searches_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    form = SearchForm(request.POST or None, project=access.project)
    started = start_from_form(
        request,
        slug,
        form,
        start=lambda: search_start(project=access.project, user=request.user, **form.cleaned_data),
        invalid=SearchInvalid,
        then=lambda search: redirect("search", slug=slug, search_id=search.pk),
    )
    if started is not None:
        return started
    context = {
        "access": access,
        "project": access.project,
        "can_manage": access.can(Perm.MANAGE),
        "problem": selection_problem(access.project),
        "has_endpoints": JudgeEndpoint.objects.filter(project=access.project).exists(),
        "searches": Paginator(
            SearchRun.objects.filter(project=access.project)
            .select_related("job", "endpoint", "proposer", "winner__metagrader")
            .annotate(candidate_count=Count("candidates"), best=Max("candidates__score"))
            .order_by("-created_at", "-pk"),
            SEARCHES_PAGE,
        ).get_page(request.GET.get("page")),
        "form": form,
    }
    return render(request, "graders/search_list.html", context, status=400 if form.errors else 200)


@require_GET
@login_required
def search_page(request: HttpRequest, slug: str, search_id: int) -> HttpResponse:
    """The full page, or the fragment htmx polls: the status every second, the results less
    often and once more when the status sees the search stop."""
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    search = _search_get(access, search_id)
    target = request.htmx.target if request.htmx else None
    fragment = target if target in (STATUS_FRAGMENT, RESULTS_FRAGMENT) else None
    response = _search_render(request, access, search, fragment=fragment)
    if fragment == STATUS_FRAGMENT and not search.job.is_active:
        trigger_client_event(response, FINISHED_EVENT)
    return response


@require_POST
@login_required
def search_cancel(request: HttpRequest, slug: str, search_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    search = _search_get(access, search_id)
    job_cancel(job=search.job, by=request.user)
    messages.info(request, "Cancel requested: the search stops at its next progress report.")
    return redirect("search", slug=slug, search_id=search.pk)


@require_POST
@login_required
def search_resume_view(request: HttpRequest, slug: str, search_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    search = _search_get(access, search_id)
    return resume_with_budget(
        request,
        search,
        spent=search_usage(search),
        resume=lambda **budget: search_resume(search=search, **budget),
        rerender=lambda form: _search_render(request, access, search, resume_form=form, status=400),
        back=redirect("search", slug=slug, search_id=search.pk),
        stopped_only="Only a stopped search (cancelled, failed or out of budget) can be resumed.",
        resumed="Resumed: graded candidates and cached judge answers are kept.",
    )


@require_POST
@login_required
def search_label_next(request: HttpRequest, slug: str, search_id: int) -> HttpResponse:
    """ "Label these next": the queue serves the pairs that best tell the candidates apart."""
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    search = _search_get(access, search_id)
    try:
        count = which_wins_queue(project=access.project)
    except WhichWinsUnavailable as exc:
        messages.error(request, f"Which grader wins cannot run yet: {exc}.")
    else:
        messages.success(
            request,
            f"The labeling queue now follows Which grader wins: {count} queued pairs ranked, "
            "the most telling first.",
        )
    return redirect("search", slug=slug, search_id=search.pk)


@require_GET
@login_required
def candidate_page(
    request: HttpRequest, slug: str, search_id: int, candidate_id: int
) -> HttpResponse:
    """One candidate with what produced it: for a rejected proposal, the proposer's prompt,
    its raw answer and the validation errors, which is all there is to read."""
    access = project_access(user=request.user, slug=slug, perm=Perm.SEE_SOURCES)
    candidate = _candidate_get(access, search_id, candidate_id)
    context = {"access": access, "project": access.project, "candidate": candidate}
    return render(request, "graders/candidate.html", context)


@require_POST
@login_required
def candidate_evaluate(
    request: HttpRequest, slug: str, search_id: int, candidate_id: int
) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    candidate = _candidate_get(access, search_id, candidate_id, graded=True)
    search = candidate.search
    try:
        run = candidate_eval_start(candidate=candidate, user=request.user)
    except SearchInvalid as exc:
        messages.error(request, f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
    else:
        messages.success(request, f"Grading {candidate.metagrader} on D_eval (run #{run.pk}).")
    return redirect("search", slug=slug, search_id=search.pk)


@require_POST
@login_required
def candidate_promote(
    request: HttpRequest, slug: str, search_id: int, candidate_id: int
) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    candidate = _candidate_get(access, search_id, candidate_id, graded=True)
    _promote(request, access, candidate.metagrader, candidate.search)
    return redirect("search", slug=slug, search_id=search_id)


@require_POST
@login_required
def program_promote(request: HttpRequest, slug: str, grader_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    grader = Metagrader.objects.filter(project=access.project, pk=grader_id).first()
    if grader is None:
        raise Http404
    _promote(request, access, grader, None)
    return redirect("program", slug=slug, grader_id=grader.pk)


def _promote(
    request: HttpRequest, access: ProjectAccess, grader: Metagrader, search: SearchRun | None
) -> None:
    selection = grader_promote(
        project=access.project, metagrader=grader, user=request.user, search=search
    )
    messages.success(
        request,
        f"{grader.name} is now the {grader.kind} grader in use (version {selection.version}).",
    )


def _search_get(access: ProjectAccess, search_id: int) -> SearchRun:
    search = (
        SearchRun.objects.select_related("job", "endpoint", "proposer", "warm_start")
        .filter(project=access.project, pk=search_id)
        .first()
    )
    if search is None:
        raise Http404
    return search


def _candidate_get(
    access: ProjectAccess, search_id: int, candidate_id: int, graded: bool = False
) -> Candidate:
    """A candidate of the search; with `graded`, only one that has a program to act on."""
    candidate = (
        Candidate.objects.select_related(
            "search__job", "search__endpoint", "metagrader", "selection_run", "eval_run"
        )
        .filter(search__project=access.project, search_id=search_id, pk=candidate_id)
        .first()
    )
    if candidate is None or (graded and candidate.metagrader is None):
        raise Http404
    return candidate


def _search_render(
    request: HttpRequest,
    access: ProjectAccess,
    search: SearchRun,
    *,
    fragment: str | None = None,
    resume_form: ResumeBudgetForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The page or one fragment. The status fragment, polled every second, reads only the
    job and the spending; the results are read for the page and their own fragment."""
    job = search.job
    usage = search_usage(search)
    context: dict[str, Any] = {
        "access": access,
        "project": access.project,
        "can_manage": access.can(Perm.MANAGE),
        "search": search,
        "job": job,
        "usage": usage,
        "judge_usage": search_judge_usage(search),
        "elapsed": _elapsed(job.started_at, job.finished_at),
        "resumable": job.status in Job.RESUMABLE,
        "resume_form": resume_form or ResumeBudgetForm(limits=search, spent=usage),
    }
    if fragment != STATUS_FRAGMENT:
        context |= _results_context(access, search)
    template = "graders/search.html" + (f"#{fragment}" if fragment else "")
    return render(request, template, context, status=status)


def _results_context(access: ProjectAccess, search: SearchRun) -> dict[str, Any]:
    candidates = list(
        Candidate.objects.filter(search=search).select_related(
            "metagrader", "selection_run", "eval_run"
        )
    )
    ranked = candidates_ranked(candidates)
    winner = next((c for c in candidates if c.pk == search.winner_id), None)
    selected = grader_selected(project=access.project, kind=search.kind)
    return {
        "ranked": ranked,
        "unranked": [c for c in candidates if c not in ranked],
        "selected": selected,
        "winner": winner,
        "winner_metrics": _winner_metrics(winner) if winner else [],
        "held_out_shown": bool(winner and winner.eval_run and _held_out(winner.eval_run)),
        "chart": curve_svg(search.curve) if search.curve else "",
        "curve_rows": [_curve_row(point) for point in search.curve],
        "curve_untouched": any(p.get("untouched") is not None for p in search.curve),
        "curve_warning": curve_warning(search.curve),
        "which_wins": which_wins_panel(search=search),
        "research": research_comparison(search),
    }


def _winner_metrics(winner: Candidate) -> list[tuple[str, Any, Any]]:
    """(label, on D_selection, on D_eval) for each metric either split reports."""
    selection = winner.selection_run.evaluation if winner.selection_run else {}
    evaluation = winner.eval_run.evaluation if winner.eval_run else {}
    return [
        (label, selection.get(key), evaluation.get(key))
        for key, label in WINNER_METRICS
        if selection.get(key) or evaluation.get(key)
    ]


def _held_out(run: GradingRun) -> bool:
    """Whether the run's by-domain table marks a held-out domain (its note explains them)."""
    return any(row.get("held_out") for row in (run.evaluation or {}).get("by_domain", []))


def _curve_row(point: dict[str, Any]) -> dict[str, Any]:
    """A curve point in the {value, ci} shape that graders/_metric.html shows."""

    def metric(key: str) -> dict[str, Any] | None:
        value = point.get(key)
        return None if value is None else {"value": value, "ci": point.get(f"{key}_ci")}

    return point | {
        "selection": metric("selection"),
        "untouched": metric("untouched"),
        "eval": metric("eval"),
    }


def _elapsed(started: datetime | None, finished: datetime | None) -> str:
    if started is None:
        return "not started"
    seconds = int(((finished or timezone.now()) - started) / timedelta(seconds=1))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
