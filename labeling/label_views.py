"""The expert's pages: pairwise labeling and criterion grading, keyboard first.

Each POST answers with the next card as a fragment, so the page never reloads; the script in
static/js/label.js retries a submission that did not reach the server."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labeling import next_steps
from labeling.access import Perm, ProjectAccess, project_access
from labeling.agreement_charts import confidence_bars, kappa_heatmap
from labeling.agreement_stats import tally_annotator_summaries, tally_report
from labeling.criterion_grading import GradesRejected, ItemMark, criterion_grades_submit
from labeling.flags import FlagInput, FlagRejected, flag_resolve, flags_for_admin, pair_flag
from labeling.forms import QueueBuildForm, QueueStrategyForm
from labeling.models import Annotator, FlagReason, QueueAssignment, Response, RubricItem
from labeling.my_labels import LABELS_PER_PAGE, my_assignments, my_labels_view
from labeling.queue import (
    LabelInput,
    LabelRejected,
    annotator_for_user,
    assignment_own,
    assignment_skip,
    label_submit,
    pair_claim_next,
    queue_blocks,
    queue_build,
    queue_progress,
    queue_refresh_soon,
    queue_settings_set,
)
from labeling.selectors import (
    agreement_panel,
    agreement_tally,
    agreement_workloads,
    criterion_grading_left,
    criterion_grading_next,
    criterion_grading_view,
    pair_view,
)
from labeling.strategies import strategy_fallback, strategy_for, strategy_specs

# What the "?" overlay lists on each page: the keys (each shown as one key cap) and what they do.
LABEL_SHORTCUTS = [
    (("←", "→"), "pick Response 1 or Response 2 (or click a response)"),
    (("T",), "a tie, when the project allows ties"),
    (("1", "2", "3"), "confidence: a guess, leaning, certain"),
    (("Enter",), "submit the label (or start, on a block's introduction)"),
    (("Backspace",), "back to the pair before, to revise its label"),
    (("S",), "skip this pair: it goes to someone else"),
    (("F",), "flag this pair with a reason (it is skipped too)"),
    (("D",), "open or close the documents panel"),
    (("X",), "expand or collapse all tool calls"),
    (("?",), "this list of shortcuts"),
    (("Esc",), "close this list or the flag form"),
]
GRADE_SHORTCUTS = [
    (("J", "K"), "next or previous criterion"),
    (("P",), "pass the focused criterion"),
    (("F",), "fail the focused criterion"),
    (("N",), "write a note on the criterion just marked"),
    (("Esc",), "leave the note (or close this list)"),
    (("Enter",), "submit the grades"),
    (("D",), "open or close the documents panel"),
    (("X",), "expand or collapse all tool calls"),
    (("?",), "this list of shortcuts"),
]


def _card(
    request: HttpRequest,
    access: ProjectAccess,
    annotator: Annotator,
    assignment: QueueAssignment | None,
    *,
    fragment: bool,
) -> HttpResponse:
    context = {
        "access": access,
        "project": access.project,
        "progress": queue_progress(project=access.project, annotator=annotator),
        "pair": pair_view(assignment=assignment) if assignment is not None else None,
        "shortcuts": LABEL_SHORTCUTS,
        "flag_reasons": FlagReason.choices,
    }
    template = "labeling/label.html" + ("#pair-card" if fragment else "")
    return render(request, template, context)


@require_GET
@login_required
def label_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    annotator = annotator_for_user(project=access.project, user=request.user)
    assignment = pair_claim_next(project=access.project, annotator=annotator)
    return _card(
        request,
        access,
        annotator,
        assignment,
        fragment=bool(request.htmx) or "fragment" in request.GET,
    )


def _own_assignment(
    request: HttpRequest, access: ProjectAccess, assignment_id: int
) -> QueueAssignment:
    annotator = annotator_for_user(project=access.project, user=request.user)
    assignment = assignment_own(
        project=access.project, annotator=annotator, assignment_id=assignment_id
    )
    if assignment is None:
        raise Http404
    return assignment


@require_GET
@login_required
def label_revise(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    """Any pair the annotator was served, with their current label on it (Backspace asks for
    the card alone; My labels opens the whole page); submitting replaces that label."""
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    assignment = _own_assignment(request, access, assignment_id)
    fragment = bool(request.htmx) or "fragment" in request.GET
    return _card(request, access, assignment.annotator, assignment, fragment=fragment)


@require_POST
@login_required
def label_submit_view(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    assignment = _own_assignment(request, access, assignment_id)
    try:
        confidence = request.POST.get("confidence", "")
        seconds = request.POST.get("seconds", "")
        label = LabelInput(
            side=request.POST.get("side", ""),
            confidence=int(confidence) if confidence != "" else None,
            seconds=float(seconds) if seconds != "" else None,
        )
        label_submit(assignment=assignment, label=label)
    except (LabelRejected, ValueError) as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    annotator = assignment.annotator
    following = pair_claim_next(project=access.project, annotator=annotator)
    return _card(request, access, annotator, following, fragment=True)


@require_POST
@login_required
def label_skip(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    """Pass the pair on (back to the queue for others) and answer with the next card."""
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    assignment = _own_assignment(request, access, assignment_id)
    if not assignment_skip(assignment=assignment):
        return HttpResponse(
            "You labeled this pair already: change your label instead of skipping it.",
            status=400,
            content_type="text/plain",
        )
    following = pair_claim_next(project=access.project, annotator=assignment.annotator)
    return _card(request, access, assignment.annotator, following, fragment=True)


@require_POST
@login_required
def label_flag(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    """Flag the pair with a reason (which skips it unless labeled) and answer with the next card."""
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    assignment = _own_assignment(request, access, assignment_id)
    flag = FlagInput(reason=request.POST.get("reason", ""), note=request.POST.get("note", ""))
    try:
        pair_flag(assignment=assignment, flag=flag)
    except FlagRejected as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    following = pair_claim_next(project=access.project, annotator=assignment.annotator)
    return _card(request, access, assignment.annotator, following, fragment=True)


@require_GET
@login_required
def my_labels_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Every label this user gave in the project through the queue, newest first, each with a
    link that reopens it for revision. Only their own: nobody else's labels are read."""
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    annotator = annotator_for_user(project=access.project, user=request.user)
    task = request.GET.get("task", "").strip()
    assignments = my_assignments(project=access.project, annotator=annotator, task=task)
    page = Paginator(assignments, LABELS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "access": access,
        "project": access.project,
        "page": page,
        "labels": my_labels_view(list(page.object_list)),
        "task": task,
    }
    return render(request, "labeling/my_labels.html", context)


@require_GET
@login_required
def flags_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The project's flagged pairs for its admins: open ones first, then resolved ones."""
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    context = {
        "access": access,
        "project": access.project,
        "open": flags_for_admin(project=access.project),
        "resolved": flags_for_admin(project=access.project, resolved=True)[:50],
    }
    return render(request, "labeling/flags.html", context)


@require_POST
@login_required
def flag_resolve_view(request: HttpRequest, slug: str, flag_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    if flag_resolve(project=access.project, flag_id=flag_id, user=request.user):
        messages.success(request, "Flag resolved.")
    else:
        messages.info(request, "That flag was already resolved.")
    return redirect("flags", slug=slug)


def _grading_card(
    request: HttpRequest,
    access: ProjectAccess,
    annotator: Annotator,
    response: Response | None,
    *,
    fragment: bool,
    error: str = "",
    unsaved: list[ItemMark] | None = None,
) -> HttpResponse:
    grading = None
    if response is not None:
        grading = criterion_grading_view(
            response=response,
            annotator=annotator,
            unsaved={m.item_id: (m.passed, m.note) for m in unsaved or []},
        )
    context = {
        "access": access,
        "project": access.project,
        "grading": grading,
        "error": error,
        "left": next_steps.waiting_text(
            criterion_grading_left(
                project=access.project, annotator=annotator, cap=next_steps.WAITING_CAP
            ),
            "response",
        ),
        "shortcuts": GRADE_SHORTCUTS,
    }
    template = "labeling/grade.html" + ("#grading-card" if fragment else "")
    return render(request, template, context, status=422 if error else 200)


@require_GET
@login_required
def grade_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    annotator = annotator_for_user(project=access.project, user=request.user)
    response = criterion_grading_next(project=access.project, annotator=annotator)
    return _grading_card(request, access, annotator, response, fragment=bool(request.htmx))


@require_POST
@login_required
def grade_submit(request: HttpRequest, slug: str, response_pk: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.LABEL)
    response = Response.objects.filter(project=access.project, pk=response_pk).first()
    if response is None:
        raise Http404
    annotator = annotator_for_user(project=access.project, user=request.user)
    item_ids = RubricItem.objects.filter(
        rubric__task_id=response.task_id, rubric__author_kind="expert", rubric__origin=""
    ).values_list("pk", flat=True)
    marks = [
        ItemMark(
            item_id=pk,
            passed=request.POST[f"item-{pk}"] == "pass",
            note=request.POST.get(f"note-{pk}", ""),
        )
        for pk in item_ids
        if request.POST.get(f"item-{pk}") in {"pass", "fail"}
    ]
    try:
        criterion_grades_submit(response=response, annotator=annotator, marks=marks)
    except GradesRejected as exc:
        return _grading_card(
            request, access, annotator, response, fragment=True, error=str(exc), unsaved=marks
        )
    return _grading_card(
        request,
        access,
        annotator,
        criterion_grading_next(project=access.project, annotator=annotator),
        fragment=True,
    )


def _queue_render(
    request: HttpRequest,
    access: ProjectAccess,
    *,
    build: QueueBuildForm | None = None,
    settings: QueueStrategyForm | None = None,
) -> HttpResponse:
    project = access.project
    specs = strategy_specs()
    labels = {spec.name: spec.label for spec in specs}
    names = list(project.dimensions.filter(retired_at__isnull=True).values_list("name", flat=True))
    context: dict[str, Any] = {
        "access": access,
        "project": project,
        "blocks": queue_blocks(project=project),
        "progress": queue_progress(project=project),
        "strategy_label": labels.get(project.queue_strategy, project.queue_strategy),
        "written_label": labels.get(project.queue_written_strategy, project.queue_written_strategy),
        "hint": next((s.hint for s in specs if s.name == project.queue_strategy), ""),
    }
    if access.can(Perm.MANAGE):
        # Only managers see whether the choice can run now.
        context["fallback"] = strategy_fallback(project)
        context["open_flags"] = flags_for_admin(project=project).count()
        context["form"] = build or QueueBuildForm(dimension_names=names)
        context["settings"] = settings or QueueStrategyForm(
            specs=specs,
            initial={
                "strategy": project.queue_strategy,
                "epsilon": project.queue_epsilon,
                "refresh_labels": project.queue_refresh_labels,
            },
        )
        context["strategies"] = list(zip(context["settings"]["strategy"], specs, strict=True))
    errors = bool((build and build.errors) or (settings and settings.errors))
    return render(request, "labeling/queue.html", context, status=400 if errors else 200)


@require_http_methods(["GET", "POST"])
@login_required
def queue_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The queue's progress; managers build it here with the project's strategy."""
    access = project_access(user=request.user, slug=slug)
    if request.method == "GET":
        return _queue_render(request, access)
    project = project_access(user=request.user, slug=slug, perm=Perm.MANAGE).project
    names = list(project.dimensions.filter(retired_at__isnull=True).values_list("name", flat=True))
    form = QueueBuildForm(request.POST, dimension_names=names)
    if not form.is_valid():
        return _queue_render(request, access, build=form)
    dimensions = {d.name: d for d in project.dimensions.all()}
    choice = strategy_for(project, seed=form.cleaned_data["seed"])
    count = queue_build(
        project=project,
        strategy=choice.strategy,
        dimensions=[dimensions[name] for name in form.cleaned_data["dimensions"]] or [None],
        pairs_per_task=form.cleaned_data["pairs_per_task"],
        seed=form.cleaned_data["seed"],
    )
    messages.success(request, f"Queued {count} pairs.")
    if choice.fallback:
        messages.warning(request, f"Built with a fallback: {choice.fallback}.")
    return redirect("queue", slug=slug)


@require_POST
@login_required
def queue_strategy_set(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    form = QueueStrategyForm(request.POST, specs=strategy_specs())
    if not form.is_valid():
        return _queue_render(request, access, settings=form)
    stale = queue_settings_set(
        project=access.project,
        strategy=form.cleaned_data["strategy"],
        epsilon=form.cleaned_data["epsilon"],
        refresh_labels=form.cleaned_data["refresh_labels"],
    )
    saved = "Queue settings saved."
    if stale and queue_refresh_soon(access.project):
        saved += " The priorities will be rewritten with them in the background."
    messages.success(request, saved)
    return redirect("queue", slug=slug)


@require_POST
@login_required
def queue_refresh_now(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    if queue_refresh_soon(access.project):
        messages.success(
            request,
            "Priorities will be rewritten in the background; reload this page in a minute to "
            "see when they were.",
        )
    else:
        messages.info(request, "A rewrite of the priorities is already pending.")
    return redirect("queue", slug=slug)


@require_GET
@login_required
def agreement_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug)
    names = list(access.project.dimensions.values_list("name", flat=True))
    dimension = request.GET.get("dimension") or None
    if dimension is not None and dimension not in names:
        raise Http404("No such dimension.")
    context = {"access": access, "project": access.project, "dimensions": names}
    context["dimension"] = dimension
    # Whoever may export the labels reads every one of them anyway; everyone else (experts)
    # gets figures that cannot reveal a colleague's label (agreement_panel).
    if not access.can(Perm.EXPORT):
        context |= agreement_panel(project=access.project, user=request.user, dimension=dimension)
        return render(request, "labeling/agreement_panel.html", context)
    counted = agreement_tally(project=access.project)
    context["report"] = tally_report(counted, dimension=dimension)
    context["kappa_chart"] = kappa_heatmap(context["report"])
    context["confidence_chart"] = confidence_bars(counted, dimension=dimension)
    return render(request, "labeling/agreement.html", context)


@require_GET
@login_required
def annotators_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    summaries = [
        (summary, [summary.confidence.get(level, 0) for level in (0, 1, 2, None)])
        for summary in tally_annotator_summaries(
            agreement_tally(project=access.project), agreement_workloads(project=access.project)
        )
    ]
    context = {"access": access, "project": access.project, "summaries": summaries}
    return render(request, "labeling/annotators.html", context)
