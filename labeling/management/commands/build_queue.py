"""``manage.py build_queue --project SLUG [--dimension NAME ...] [--pairs-per-task N]
[--strategy NAME]``."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from labeling.cli import project_or_error
from labeling.queue import queue_build, queue_settings_set
from labeling.strategies import strategy_for, strategy_specs


class Command(BaseCommand):
    help = (
        "Queue response pairs for labeling (one block per dimension, or one overall block), "
        "ranked by the project's queue strategy."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--dimension", nargs="*", default=[], metavar="NAME")
        parser.add_argument("--pairs-per-task", type=int, default=10)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--strategy",
            metavar="NAME",
            help="choose the project's queue strategy first (stored: later rewrites of the "
            "priorities use it too)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        known = {d.name: d for d in project.dimensions.all()}
        unknown = [name for name in options["dimension"] if name not in known]
        if unknown:
            raise CommandError(f"unknown dimension(s): {', '.join(unknown)}")
        if options["pairs_per_task"] < 1:
            raise CommandError("--pairs-per-task must be at least 1")
        if options["strategy"] is not None:
            names = [spec.name for spec in strategy_specs()]
            if options["strategy"] not in names:
                raise CommandError(
                    f"unknown strategy {options['strategy']!r}; known: {', '.join(names)}"
                )
            queue_settings_set(
                project=project,
                strategy=options["strategy"],
                epsilon=project.queue_epsilon,
                refresh_labels=project.queue_refresh_labels,
            )
        choice = strategy_for(project, seed=options["seed"])
        if choice.fallback:
            self.stderr.write(f"Fallback: {choice.fallback}.")
        count = queue_build(
            project=project,
            strategy=choice.strategy,
            dimensions=[known[name] for name in options["dimension"]] or [None],
            pairs_per_task=options["pairs_per_task"],
            seed=options["seed"],
        )
        self.stdout.write(f"Queued {count} pairs in {project.slug} by {choice.strategy.name}.")
