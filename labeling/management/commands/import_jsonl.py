"""``manage.py import_jsonl PATH --project SLUG [--create]``."""

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from labeling.imports import ImportRejected, jsonl_import
from labeling.models import Project


class Command(BaseCommand):
    help = "Import a JSONL file into a project, all or nothing (see FORMATS.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--create", action="store_true", help="Create the project if missing.")
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["path"]
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        slug = options["project"]
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            if not options["create"]:
                raise CommandError(f"project {slug!r} does not exist (add --create to create it)")
            project = Project.objects.create(slug=slug, name=slug)
        try:
            report = jsonl_import(project=project, path=path)
        except ImportRejected as exc:
            for error in exc.errors:
                sys.stderr.write(f"{path}:{error}\n")
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json()))
            return
        self.stdout.write(f"{slug}: {report.summary()}")
