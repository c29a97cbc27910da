"""Who may do what. Every view and API endpoint resolves its project through here, so a user
who is not a member gets 404 (the project might as well not exist) and a member whose role
lacks the permission gets 403."""

from enum import StrEnum
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404

from labeling.models import Job, Membership, Project, Role


class Perm(StrEnum):
    VIEW = "view"
    LABEL = "label"
    REVIEW = "review"
    SEE_SOURCES = "see_sources"  # model names and metadata that labeling must not show
    IMPORT = "import"
    EXPORT = "export"
    MANAGE = "manage"  # splits, members, settings


ROLE_PERMS: dict[str, frozenset[Perm]] = {
    Role.ADMIN: frozenset(Perm),
    Role.EXPERT: frozenset({Perm.VIEW, Perm.LABEL}),
    Role.REVIEWER: frozenset({Perm.VIEW, Perm.REVIEW, Perm.SEE_SOURCES, Perm.EXPORT}),
}


class ProjectAccess:
    def __init__(self, project: Project, role: str) -> None:
        self.project = project
        self.role = role
        self.perms = ROLE_PERMS[role]

    def can(self, perm: Perm) -> bool:
        return perm in self.perms


def project_access(*, user: Any, slug: str, perm: Perm = Perm.VIEW) -> ProjectAccess:
    """The project `slug` as seen by `user`; Http404 for non-members, 403 without `perm`."""
    if not user.is_authenticated:
        raise Http404
    membership = (
        Membership.objects.select_related("project").filter(user=user, project__slug=slug).first()
    )
    if membership is None:
        raise Http404
    access = ProjectAccess(membership.project, membership.role)
    if not access.can(perm):
        raise PermissionDenied(f"Your role ({membership.role}) does not allow this.")
    return access


def job_access(*, user: Any, job_id: int, cancel: bool = False) -> tuple[Job, ProjectAccess | None]:
    """A job visible to `user`: their own, or one of a project they belong to, with the user's
    access to that project (None for a job of no project). Cancelling needs the project's
    admin role or to be the job's creator."""
    job = Job.objects.select_related("project").filter(pk=job_id).first()
    if job is None or not user.is_authenticated:
        raise Http404
    if job.project is None:
        if job.created_by_id != user.pk:
            raise Http404
        return job, None
    access = project_access(user=user, slug=job.project.slug)
    if cancel and job.created_by_id != user.pk and not access.can(Perm.MANAGE):
        raise PermissionDenied("Only the job's creator or a project admin can cancel it.")
    return job, access
