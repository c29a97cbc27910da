"""``manage.py synthesis_import_release DIR --project SLUG --synthesis ID [--judges A,B]``: a
PADME-style release (eval_dataset.json and eval_answers.json in DIR) as a new synthesis, all or
nothing."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.engine.synthesis.release import ReleaseInvalid
from graders.synthesis.kept_pairs import release_import
from labeling.cli import project_or_error
from labeling.imports import ImportRejected


class Command(BaseCommand):
    help = "Import a release's kept pairs (blind dataset + answers) as a synthesis."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", type=Path, metavar="DIR")
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--synthesis", required=True, metavar="ID")
        parser.add_argument(
            "--judges",
            default="release",
            help="the filter cascade that kept the pairs, comma-separated (default: release)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        judges = [j.strip() for j in options["judges"].split(",") if j.strip()]
        if not judges:
            raise CommandError("--judges: name at least one judge")
        try:
            report = release_import(
                project=project,
                directory=options["directory"],
                synthesis_id=options["synthesis"],
                judges=judges,
            )
        except ReleaseInvalid as exc:
            raise CommandError(f"not imported: {exc}") from None
        except ImportRejected as exc:
            first = exc.errors[0] if exc.errors else None
            raise CommandError(f"not imported: {exc}{f' ({first})' if first else ''}") from None
        self.stdout.write(report.summary())
