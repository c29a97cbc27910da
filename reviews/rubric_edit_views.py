"""Inline editing of a generated rubric and its re-checks, as htmx fragments.

Each edit answers with the rubric panel (every row carries the new version) plus out-of-band
updates of the matrix, the re-check and the history, and starts a re-check run; an invalid edit
answers 422 with the form as typed; an edit made on an outdated version answers 409, with the
form and the criterion's current text, or with the rubric as it is now for one-click changes.
Without htmx every action falls back to the review page."""

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import reswap, retarget

from graders.models import Metagrader
from graders.services import RunInvalid
from labeling.access import Perm, ProjectAccess, project_access
from labeling.models import AuthorKind, Rubric
from labeling.rubric_items import GradesMoved
from reviews.forms import CriterionForm
from reviews.rubric_edit import (
    CriterionInvalid,
    RubricChange,
    RubricConflict,
    criterion_delete,
    criterion_move,
    criterion_save,
    rubric_restore,
)
from reviews.rubric_grader import RubricSetupMissing, rubric_writer
from reviews.rubric_recheck import recheck_start, recheck_view
from reviews.rubric_review import judgement, review_page, review_state
from reviews.views import REVIEW_PAGE


def _review_rubric(
    request: HttpRequest, slug: str, rubric_id: int
) -> tuple[ProjectAccess, Rubric, Metagrader]:
    access = project_access(user=request.user, slug=slug, perm=Perm.REVIEW)
    rubric = (
        Rubric.objects.select_related("task__project")
        .filter(pk=rubric_id, task__project=access.project, author_kind=AuthorKind.GENERATED)
        .first()
    )
    if rubric is None:
        raise Http404
    try:
        grader = rubric_writer(rubric=rubric)
    except RubricSetupMissing:
        raise Http404 from None
    return access, rubric, grader


def _review_url(rubric: Rubric, anchor: str = "") -> str:
    url = reverse("rubric-review", args=[rubric.task.project.slug, rubric.task.external_id])
    return url + (f"#{anchor}" if anchor else "")


def _fragment(
    request: HttpRequest, access: ProjectAccess, partial: str, status: int = 200, **context: Any
) -> HttpResponse:
    return render(
        request,
        f"{REVIEW_PAGE}#{partial}",
        {"access": access, "project": access.project, **context},
        status=status,
    )


def _changed(
    request: HttpRequest,
    access: ProjectAccess,
    rubric: Rubric,
    grader: Metagrader,
    *,
    notice: str = "",
    status: int = 200,
    focus: str | None = None,
) -> HttpResponse:
    """The rubric panel as it is now, with the matrix, re-check and history out of band."""
    if not request.htmx:
        if notice:
            messages.warning(request, notice)
        return redirect(_review_url(rubric))
    context = review_state(rubric=rubric, grader=grader)
    context |= {"task": rubric.task, "notice": notice, "focus": focus}
    response = render(
        request,
        "reviews/_rubric_changed.html",
        {"access": access, "project": access.project, **context},
        status=status,
    )
    return reswap(retarget(response, "#rubric-panel"), "outerHTML")


def _after_change(
    request: HttpRequest, access: ProjectAccess, change: RubricChange, grader: Metagrader
) -> HttpResponse:
    notices = _grades_notices(change.grades)
    if change.regrade:
        try:
            recheck_start(rubric=change.rubric, key=change.key, user=request.user)
        except (RubricSetupMissing, RunInvalid) as exc:
            notices.insert(0, f"Saved as version {change.rubric.version}; not re-checked: {exc}")
    notice = " ".join(notices)
    return _changed(request, access, change.rubric, grader, notice=notice, focus=change.key)


def _grades_notices(moved: GradesMoved) -> list[str]:
    """What happened to experts' criterion grades, for the reviewer who removed or restored."""
    notices = []
    if moved.retired:
        notices.append(
            f"{_grades_are(moved.retired)} kept with the rubric's history: restoring a version "
            "that has the removed criteria brings them back."
        )
    if moved.restored:
        notices.append(f"{_grades_are(moved.restored)} back on the restored criteria.")
    return notices


def _grades_are(count: int) -> str:
    return "1 expert grade is" if count == 1 else f"{count} expert grades are"


def _conflict_notice(conflict: RubricConflict) -> str:
    return (
        f"Nothing was changed: someone saved version {conflict.rubric.version} of this rubric "
        "since you opened it. It is shown below as it is now; do it again if it is still needed."
    )


@require_GET
@login_required
def criterion_edit(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    access, rubric, grader = _review_rubric(request, slug, rubric_id)
    key = request.GET.get("key", "")
    if not request.htmx:
        return redirect(_review_url(rubric) + "?" + urlencode({"edit": key}))
    if key and not rubric.items.filter(key=key).exists():
        notice = "This criterion was removed meanwhile; the rubric is shown as it is now."
        return _changed(request, access, rubric, grader, notice=notice, status=409)
    return _fragment(
        request,
        access,
        "criterion-row-edit",
        rubric=rubric,
        form=CriterionForm.for_criterion(rubric, key),
    )


@require_GET
@login_required
def criterion_row(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    """Leaving an edit: the criterion's row (or the add button) as it is now."""
    access, rubric, grader = _review_rubric(request, slug, rubric_id)
    key = request.GET.get("key", "")
    if not key:
        return _fragment(request, access, "criterion-add", rubric=rubric)
    item = rubric.items.filter(key=key).first()
    if item is None:
        notice = "This criterion was removed meanwhile; the rubric is shown as it is now."
        return _changed(request, access, rubric, grader, notice=notice, status=409)
    recheck = recheck_view(rubric=rubric, grader=grader)
    return _fragment(request, access, "criterion-row", rubric=rubric, item=item, recheck=recheck)


@require_POST
@login_required
def criterion_save_view(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    access, rubric, grader = _review_rubric(request, slug, rubric_id)
    form = CriterionForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, access, rubric, grader, form, status=422)
    data = form.cleaned_data
    try:
        change = criterion_save(
            rubric=rubric,
            seen_version=data["version"],
            key=data["key"] or None,
            text=data["text"],
            weight=data["weight"],
            editor=request.user.get_username(),
        )
    except CriterionInvalid as exc:
        for field, message in exc.problems.items():
            form.add_error(field or None, message)
        return _form_refused(request, access, rubric, grader, form, status=422)
    except RubricConflict as conflict:
        # The form keeps what was typed and now carries the current version: saving again
        # replaces the current text knowingly, after reading it in the message.
        data = request.POST.copy()
        data["version"] = str(conflict.rubric.version)
        fresh = CriterionForm(data)
        fresh.is_valid()
        return _form_refused(
            request, access, conflict.rubric, grader, fresh, status=409, conflict=conflict
        )
    return _after_change(request, access, change, grader)


def _form_refused(
    request: HttpRequest,
    access: ProjectAccess,
    rubric: Rubric,
    grader: Metagrader,
    form: CriterionForm,
    *,
    status: int,
    conflict: RubricConflict | None = None,
) -> HttpResponse:
    if request.htmx:
        return _fragment(
            request,
            access,
            "criterion-row-edit",
            status=status,
            rubric=rubric,
            form=form,
            conflict=conflict,
        )
    context: dict[str, Any] = {"access": access, "project": access.project}
    context |= review_page(rubric=rubric, grader=grader)
    context |= {"edit_key": form["key"].value() or "", "form": form, "conflict": conflict}
    return render(request, REVIEW_PAGE, context, status=status)


def _button_change(
    request: HttpRequest, slug: str, rubric_id: int, act: Callable[[Rubric, int, str], RubricChange]
) -> HttpResponse:
    """Run a one-click change (move, delete, restore) made on the posted version, and answer
    with the panel as it is now."""
    access, rubric, grader = _review_rubric(request, slug, rubric_id)
    version = _posted_int(request, "version")
    try:
        change = act(rubric, version, request.user.get_username())
    except CriterionInvalid as exc:
        notice = "; ".join(exc.problems.values())
        return _changed(request, access, rubric, grader, notice=notice, status=422)
    except RubricConflict as conflict:
        notice = _conflict_notice(conflict)
        return _changed(request, access, conflict.rubric, grader, notice=notice, status=409)
    return _after_change(request, access, change, grader)


def _posted_int(request: HttpRequest, name: str) -> int:
    try:
        return int(request.POST.get(name, ""))
    except ValueError:
        raise BadRequest(f"{name} must be a whole number") from None


@require_POST
@login_required
def criterion_delete_view(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    key = request.POST.get("key", "")
    return _button_change(
        request,
        slug,
        rubric_id,
        lambda rubric, version, editor: criterion_delete(
            rubric=rubric, seen_version=version, key=key, editor=editor
        ),
    )


@require_POST
@login_required
def criterion_move_view(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    key = request.POST.get("key", "")
    offset = -1 if request.POST.get("direction") == "up" else 1
    return _button_change(
        request,
        slug,
        rubric_id,
        lambda rubric, version, editor: criterion_move(
            rubric=rubric, seen_version=version, key=key, offset=offset, editor=editor
        ),
    )


@require_POST
@login_required
def rubric_restore_view(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    return _button_change(
        request,
        slug,
        rubric_id,
        lambda rubric, version, editor: rubric_restore(
            rubric=rubric,
            seen_version=version,
            version=_posted_int(request, "restore"),
            editor=editor,
        ),
    )


@require_POST
@login_required
def rubric_recheck(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    access, rubric, grader = _review_rubric(request, slug, rubric_id)
    notice = ""
    try:
        recheck_start(rubric=rubric, key=None, user=request.user)
    except (RubricSetupMissing, RunInvalid) as exc:
        notice = f"Not re-checked: {exc}"
    if not request.htmx:
        if notice:
            messages.warning(request, notice)
        return redirect(_review_url(rubric, "recheck"))
    recheck = recheck_view(rubric=rubric, grader=grader)
    return _fragment(
        request, access, "recheck", rubric=rubric, recheck=recheck, recheck_notice=notice
    )


@require_GET
@login_required
def rubric_recheck_status(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    """Polled while a re-check runs; once it is over, also refreshes the matrix and clears
    the spinner on the edited criterion (out of band)."""
    access, rubric, grader = _review_rubric(request, slug, rubric_id)
    recheck = recheck_view(rubric=rubric, grader=grader)
    context: dict[str, Any] = {"rubric": rubric, "recheck": recheck, "task": rubric.task}
    if recheck.active:
        return _fragment(request, access, "recheck", **context)
    context["judgement"] = judgement(rubric=rubric, grader=grader)
    return render(
        request,
        "reviews/_recheck_done.html",
        {"access": access, "project": access.project, **context},
    )
