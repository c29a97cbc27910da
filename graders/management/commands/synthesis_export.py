"""``manage.py synthesis_export --project SLUG [--synthesis ID] (--pairs PATH | --release DIR)
[--seed N]``: a synthesis's kept pairs as chosen/rejected JSONL (``-`` for stdout), or as the
PADME release's blind dataset and answers."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.synthesis.cli import synthesis_arguments, synthesis_or_error
from graders.synthesis.kept_pairs import (
    ANSWERS_FILE,
    BLIND_FILE,
    kept_pairs_records,
    release_export,
)
from labeling.jsonl import jsonl_write


class Command(BaseCommand):
    help = "Export a synthesis's kept pairs as preference pairs or as a PADME-style release."

    def add_arguments(self, parser: CommandParser) -> None:
        synthesis_arguments(parser)
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--pairs", metavar="PATH", help="JSONL file, or - for stdout")
        target.add_argument("--release", type=Path, metavar="DIR")
        parser.add_argument("--seed", type=int, default=0, help="slot order of the release")

    def handle(self, *args: Any, **options: Any) -> None:
        synthesis = synthesis_or_error(options)
        try:
            if options["release"] is not None:
                directory: Path = options["release"]
                count = release_export(
                    synthesis=synthesis, directory=directory, seed=options["seed"]
                )
                self.stderr.write(
                    f"{count} kept pairs written to {directory / BLIND_FILE} and "
                    f"{directory / ANSWERS_FILE}"
                )
                return
            records = kept_pairs_records(synthesis=synthesis)
            if options["pairs"] == "-":
                jsonl_write(records, self.stdout)
                return
            path = Path(options["pairs"])
            partial = path.with_name(path.name + ".partial")
            with partial.open("w", encoding="utf-8") as out:
                count = jsonl_write(records, out)
            partial.replace(path)
            self.stderr.write(f"{count} kept pairs written to {path}")
        except OSError as exc:
            raise CommandError(f"cannot write: {exc.strerror or exc}") from None
