"""A project's settings, dimensions and members changed from the app (admins only), each change
recorded as a ProjectChange with who and when; and projects created from the app, whose
creator becomes their first admin.

A project keeps at least one admin: removing or demoting the last one is refused, so nobody
locks a project out of its own settings."""

from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import slugify

from labeling.models import Dimension, Membership, Project, ProjectChange, Role

# What the settings page edits, in the order it shows them.
SETTINGS_FIELDS = (
    "name",
    "guidelines",
    "allow_ties",
    "overlap",
    "capture_rate",
    "drift_margin",
    "drift_min_pairs",
    "research_auto",
    "research_max_calls",
    "research_max_cost",
)


class SettingsRefused(ValueError):
    """A change that would break the project, named."""


def _record(
    project: Project, user: Any, kind: str, subject: str, detail: Mapping[str, Any]
) -> ProjectChange:
    return ProjectChange.objects.create(
        project=project, user=user, kind=kind, subject=subject, detail=dict(detail)
    )


def project_settings_save(*, project: Project, user: Any, values: Mapping[str, Any]) -> list[str]:
    """Set the settings in `values` (SETTINGS_FIELDS only) and record the ones that changed.
    Returns their names; nothing is written or recorded when none changed."""
    unknown = set(values) - set(SETTINGS_FIELDS)
    if unknown:
        raise SettingsRefused(f"not a project setting: {', '.join(sorted(unknown))}")
    if values.get("research_auto") and (
        values.get("research_max_calls") is None and values.get("research_max_cost") is None
    ):
        raise SettingsRefused(
            "automatic re-search needs a budget: set its maximum calls or maximum cost"
        )
    changed = {
        name: [getattr(project, name), value]
        for name, value in values.items()
        if getattr(project, name) != value
    }
    if not changed:
        return []
    with transaction.atomic():
        for name, (_, value) in changed.items():
            setattr(project, name, value)
        project.full_clean()
        project.save(update_fields=list(changed))
        _record(project, user, ProjectChange.Kind.SETTINGS, "settings", changed)
    return list(changed)


def dimension_add(*, project: Project, user: Any, name: str, description: str) -> Dimension:
    name = name.strip()
    if not name:
        raise SettingsRefused("a dimension needs a name")
    if Dimension.objects.filter(project=project, name=name).exists():
        raise SettingsRefused(f"the project already has a dimension named {name!r}")
    with transaction.atomic():
        dimension = Dimension.objects.create(project=project, name=name, description=description)
        _record(project, user, ProjectChange.Kind.DIMENSION, name, {"added": [None, name]})
    return dimension


def dimension_edit(*, dimension: Dimension, user: Any, description: str) -> bool:
    """Change a dimension's description (its name is what labels and exports refer to)."""
    if dimension.description == description:
        return False
    with transaction.atomic():
        old = dimension.description
        dimension.description = description
        dimension.save(update_fields=["description"])
        _record(
            dimension.project, user, ProjectChange.Kind.DIMENSION, dimension.name,
            {"description": [old, description]},
        )  # fmt: skip
    return True


def dimension_retire(*, dimension: Dimension, user: Any, retired: bool) -> bool:
    """Retire a dimension (its labels stay; no new queue blocks ask for it) or bring it back."""
    if (dimension.retired_at is not None) == retired:
        return False
    with transaction.atomic():
        dimension.retired_at = timezone.now() if retired else None
        dimension.save(update_fields=["retired_at"])
        _record(
            dimension.project, user, ProjectChange.Kind.DIMENSION, dimension.name,
            {"retired": [not retired, retired]},
        )  # fmt: skip
    return True


def member_add(*, project: Project, user: Any, who: str, role: str) -> Membership:
    """Add the user named by `who` (a username, or an email address that exactly one user
    has) with `role`."""
    if role not in Role.values:
        raise SettingsRefused(f"unknown role {role!r}; use one of {', '.join(Role.values)}")
    who = who.strip()
    users = get_user_model().objects.filter(Q(username=who) | Q(email__iexact=who), is_active=True)
    found = list(users[:2])
    if not found:
        raise SettingsRefused(f"no active user has the username or email {who!r}")
    if len(found) > 1:
        raise SettingsRefused(f"more than one user has the email {who!r}: use the username")
    member = found[0]
    if Membership.objects.filter(project=project, user=member).exists():
        raise SettingsRefused(f"{member.username} is already a member of this project")
    with transaction.atomic():
        membership = Membership.objects.create(project=project, user=member, role=role)
        _record(project, user, ProjectChange.Kind.MEMBER, member.username, {"role": [None, role]})
    return membership


def member_role_set(*, membership: Membership, user: Any, role: str) -> bool:
    if role not in Role.values:
        raise SettingsRefused(f"unknown role {role!r}; use one of {', '.join(Role.values)}")
    if membership.role == role:
        return False
    with transaction.atomic():
        _keep_an_admin(membership, leaving=role != Role.ADMIN)
        old = membership.role
        membership.role = role
        membership.save(update_fields=["role"])
        _record(
            membership.project, user, ProjectChange.Kind.MEMBER, membership.user.username,
            {"role": [old, role]},
        )  # fmt: skip
    return True


def member_remove(*, membership: Membership, user: Any) -> None:
    with transaction.atomic():
        _keep_an_admin(membership, leaving=True)
        _record(
            membership.project, user, ProjectChange.Kind.MEMBER, membership.user.username,
            {"role": [membership.role, None]},
        )  # fmt: skip
        membership.delete()


def _keep_an_admin(membership: Membership, *, leaving: bool) -> None:
    if not leaving or membership.role != Role.ADMIN:
        return
    # Locked, so two admins removing each other at once cannot both succeed.
    admins = list(
        Membership.objects.select_for_update()
        .filter(project_id=membership.project_id, role=Role.ADMIN)
        .values_list("pk", flat=True)
    )
    if admins == [membership.pk]:
        raise SettingsRefused("a project needs at least one admin: make someone else admin first")


def project_create(*, user: Any, name: str, slug: str = "") -> Project:
    """A new project with `user` as its admin. The slug defaults to the name's."""
    name = name.strip()
    if not name:
        raise SettingsRefused("a project needs a name")
    slug = slugify(slug or name)[:80]
    if not slug:
        raise SettingsRefused("the name has no letters or digits to make a web address from")
    if Project.objects.filter(slug=slug).exists():
        raise SettingsRefused(f"the address {slug!r} is taken: choose another")
    with transaction.atomic():
        project = Project.objects.create(name=name, slug=slug)
        Membership.objects.create(project=project, user=user, role=Role.ADMIN)
        _record(project, user, ProjectChange.Kind.CREATED, name, {"slug": [None, slug]})
    return project


def change_text(change: ProjectChange) -> str:
    """A recorded change in words: "overlap 1 → 2; allow ties yes → no"."""

    def shown(value: Any) -> str:
        if value is None or value == "":
            return "none"
        if isinstance(value, bool):
            return "yes" if value else "no"
        text = str(value)
        return text if len(text) <= 60 else text[:57] + "…"

    if change.kind == ProjectChange.Kind.CREATED:
        return f"created the project at /p/{change.detail.get('slug', [None, ''])[1]}/"
    parts = []
    order = {name: index for index, name in enumerate(SETTINGS_FIELDS)}
    # In the page's order: a JSON column may keep keys in another (PostgreSQL's jsonb does).
    fields = sorted(change.detail.items(), key=lambda item: order.get(item[0], len(order)))
    for field, (old, new) in fields:
        label = field.replace("_", " ")
        if field == "added":
            parts.append(f"added dimension {new}")
        elif field == "role" and old is None:
            parts.append(f"added {change.subject} as {new}")
        elif field == "role" and new is None:
            parts.append(f"removed {change.subject} ({old})")
        elif field == "retired":
            parts.append(f"{'retired' if new else 'restored'} dimension {change.subject}")
        else:
            subject = f"{change.subject} " if change.kind != ProjectChange.Kind.SETTINGS else ""
            parts.append(f"{subject}{label}: {shown(old)} → {shown(new)}")
    return "; ".join(parts)
