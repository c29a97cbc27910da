"""The project settings page (admins) and creating a project; the rules and the change record
live in labeling/project_settings.py."""

from collections.abc import Callable
from copy import copy

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from labeling.access import Perm, project_access
from labeling.forms import DimensionAddForm, MemberAddForm, ProjectCreateForm, ProjectSettingsForm
from labeling.models import Dimension, Membership, ProjectChange, Role
from labeling.project_settings import (
    SETTINGS_FIELDS,
    SettingsRefused,
    change_text,
    dimension_add,
    dimension_edit,
    dimension_retire,
    member_add,
    member_remove,
    member_role_set,
    project_create,
    project_settings_save,
)

CHANGES_PER_PAGE = 25


@require_http_methods(["GET", "POST"])
@login_required
def settings_page(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    project = access.project
    # The form validates onto a copy: is_valid() writes the posted values onto its instance,
    # and the page (and the save, which compares against them) needs the stored ones.
    form = ProjectSettingsForm(request.POST or None, instance=copy(project))
    if request.method == "POST" and form.is_valid():
        values = {name: form.cleaned_data[name] for name in SETTINGS_FIELDS}
        try:
            changed = project_settings_save(project=project, user=request.user, values=values)
        except (SettingsRefused, ValidationError) as exc:
            form.add_error(None, exc.messages[0] if isinstance(exc, ValidationError) else str(exc))
            # A refused full_clean() leaves the new values set on the instance.
            project.refresh_from_db()
        else:
            labels = [str(form.fields[name].label) for name in changed]
            messages.success(
                request, f"Saved: {', '.join(labels)}." if changed else "Nothing changed."
            )
            return redirect("project-settings", slug=slug)
    changes = Paginator(
        ProjectChange.objects.filter(project=project).select_related("user"), CHANGES_PER_PAGE
    ).get_page(request.GET.get("page"))
    context = {
        "access": access,
        "project": project,
        "form": form,
        "dimensions": Dimension.objects.filter(project=project).order_by("retired_at", "name"),
        "dimension_form": DimensionAddForm(),
        "members": Membership.objects.filter(project=project)
        .select_related("user")
        .order_by("user__username"),
        "member_form": MemberAddForm(),
        "roles": Role.choices,
        "changes": changes,
        "change_rows": [(change, change_text(change)) for change in changes],
    }
    return render(request, "labeling/settings.html", context, status=400 if form.errors else 200)


@require_POST
@login_required
def dimension_add_view(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    form = DimensionAddForm(request.POST)
    if not form.is_valid():
        messages.error(request, "A dimension needs a name of at most 100 characters.")
        return redirect("project-settings", slug=slug)

    def add() -> str:
        dimension = dimension_add(
            project=access.project,
            user=request.user,
            name=form.cleaned_data["name"],
            description=form.cleaned_data["description"],
        )
        return f"Dimension {dimension.name} added."

    return _settings_change(request, slug, add)


@require_POST
@login_required
def dimension_update_view(request: HttpRequest, slug: str, dimension_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    dimension = get_object_or_404(Dimension, pk=dimension_id, project=access.project)
    action = request.POST.get("action")
    if action == "save":
        description = request.POST.get("description", "")[:10_000]
        if dimension_edit(dimension=dimension, user=request.user, description=description):
            messages.success(request, f"Description of {dimension.name} saved.")
    elif action in ("retire", "restore"):
        dimension_retire(dimension=dimension, user=request.user, retired=action == "retire")
        done = "retired: no new queue blocks ask for it" if action == "retire" else "restored"
        messages.success(request, f"Dimension {dimension.name} {done}.")
    else:
        messages.error(request, "Unknown action.")
    return redirect("project-settings", slug=slug)


@require_POST
@login_required
def member_add_view(request: HttpRequest, slug: str) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    form = MemberAddForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give a username or email and a role.")
        return redirect("project-settings", slug=slug)

    def add() -> str:
        membership = member_add(
            project=access.project,
            user=request.user,
            who=form.cleaned_data["who"],
            role=form.cleaned_data["role"],
        )
        return f"{membership.user.username} added as {membership.get_role_display()}."

    return _settings_change(request, slug, add)


@require_POST
@login_required
def member_update_view(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    access = project_access(user=request.user, slug=slug, perm=Perm.MANAGE)
    membership = get_object_or_404(
        Membership.objects.select_related("user", "project"),
        pk=membership_id,
        project=access.project,
    )

    def update() -> str:
        name = membership.user.username
        if request.POST.get("action") == "remove":
            member_remove(membership=membership, user=request.user)
            return f"{name} removed from the project."
        role = request.POST.get("role", "")
        if member_role_set(membership=membership, user=request.user, role=role):
            return f"{name} is now {membership.get_role_display()}."
        return ""

    return _settings_change(request, slug, update)


def _settings_change(request: HttpRequest, slug: str, change: Callable[[], str]) -> HttpResponse:
    """Make a change and say how it went on the settings page: its success message (none
    when nothing changed), or the reason it was refused."""
    try:
        done = change()
    except SettingsRefused as exc:
        messages.error(request, _sentence(exc))
    else:
        if done:
            messages.success(request, done)
    return redirect("project-settings", slug=slug)


def _sentence(exc: Exception) -> str:
    return str(exc).capitalize() + "."


@require_http_methods(["GET", "POST"])
@login_required
def project_new(request: HttpRequest) -> HttpResponse:
    form = ProjectCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            project = project_create(
                user=request.user, name=form.cleaned_data["name"], slug=form.cleaned_data["slug"]
            )
        except SettingsRefused as exc:
            form.add_error(None, _sentence(exc))
        else:
            messages.success(
                request,
                f"Project {project.name} created. Import tasks and responses next, and add "
                "the people who will label.",
            )
            return redirect("project-settings", slug=project.slug)
    return render(
        request, "labeling/project_new.html", {"form": form}, status=400 if form.errors else 200
    )
