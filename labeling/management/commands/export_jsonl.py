"""``manage.py export_jsonl --project SLUG [--kind labels|pairs] [-o PATH]``."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from labeling.cli import project_or_error
from labeling.exports import export_records
from labeling.jsonl import jsonl_write
from labeling.snapshots import label_export_record, snapshot_header


class Command(BaseCommand):
    help = "Export a project's labels (import format) or chosen/rejected pairs as JSONL."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--kind", choices=["labels", "pairs"], default="labels")
        parser.add_argument("-o", "--output", type=Path, metavar="PATH")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        export = label_export_record(project=project, kind=options["kind"])
        self.stderr.write(f"label snapshot {snapshot_header(export)}")
        records = export_records(project=project, kind=options["kind"])
        output: Path | None = options["output"]
        if output is None:
            jsonl_write(records, self.stdout)
            return
        partial = output.with_name(output.name + ".partial")
        try:
            with partial.open("w", encoding="utf-8") as out:
                count = jsonl_write(records, out)
            partial.replace(output)  # a failed export never leaves a truncated file behind
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
        self.stderr.write(f"{count} records written to {output}")
