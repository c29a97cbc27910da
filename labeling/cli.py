"""Argument checks shared by the management commands: one-line reasons on bad input."""

from django.core.management.base import CommandError

from labeling.models import Project


def project_or_error(slug: str) -> Project:
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise CommandError(f"project {slug!r} does not exist")
    return project


def dimension_check(project: Project, name: str | None) -> None:
    """Refuse a dimension the project does not have (None means all dimensions)."""
    if name is not None and not project.dimensions.filter(name=name).exists():
        raise CommandError(f"project {project.slug!r} has no dimension {name!r}")
