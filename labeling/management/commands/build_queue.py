"""``manage.py build_queue --project SLUG [--dimension NAME ...] [--pairs-per-task N]``."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from labeling.cli import project_or_error
from labeling.queue import queue_build
from labeling.strategies import CoverageFirst


class Command(BaseCommand):
    help = "Queue response pairs for labeling (one block per dimension, or one overall block)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--dimension", nargs="*", default=[], metavar="NAME")
        parser.add_argument("--pairs-per-task", type=int, default=10)
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        known = {d.name: d for d in project.dimensions.all()}
        unknown = [name for name in options["dimension"] if name not in known]
        if unknown:
            raise CommandError(f"unknown dimension(s): {', '.join(unknown)}")
        if options["pairs_per_task"] < 1:
            raise CommandError("--pairs-per-task must be at least 1")
        count = queue_build(
            project=project,
            strategy=CoverageFirst(seed=options["seed"]),
            dimensions=[known[name] for name in options["dimension"]] or [None],
            pairs_per_task=options["pairs_per_task"],
            seed=options["seed"],
        )
        self.stdout.write(f"Queued {count} pairs in {project.slug}.")
