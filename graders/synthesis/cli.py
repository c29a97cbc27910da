"""Argument checks shared by the synthesis management commands: one-line reasons on bad input."""

from collections.abc import Callable, Mapping
from typing import Any

from django.core.management.base import CommandError, CommandParser

from graders.synthesis.funnel_selectors import SynthesisChoiceError, synthesis_choose
from graders.synthesis.validation_selectors import SynthesisNotFound
from labeling.cli import project_or_error
from labeling.models import Project, Synthesis


def synthesis_arguments(parser: CommandParser) -> None:
    """--project SLUG and --synthesis ID (optional: the project's only synthesis)."""
    parser.add_argument("--project", required=True, metavar="SLUG")
    parser.add_argument("--synthesis", metavar="ID")


def synthesis_or_error(
    options: Mapping[str, Any], *, pick: Callable[..., Synthesis] = synthesis_choose
) -> Synthesis:
    """The synthesis the `synthesis_arguments` name (--synthesis, or the project's only one)
    as `pick` chooses it, or a CommandError with the one-line reason the project lookup or
    `pick` gives."""
    project: Project = project_or_error(options["project"])
    try:
        return pick(project=project, external_id=options["synthesis"])
    except (SynthesisChoiceError, SynthesisNotFound) as exc:
        raise CommandError(str(exc)) from None
