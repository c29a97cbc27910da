"""``manage.py convert_dataset``: turn a public data set into import JSONL.

Deliberately thin: the conversion lives in `labeling.converters` so it stays testable without
Django; this file only maps arguments, output and errors.
"""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from labeling.converters import SOURCES, SkipCounts, convert
from labeling.jsonl import jsonl_write


class Command(BaseCommand):
    help = (
        "Convert a public data set into the workbench JSONL import format: tau2 (a domain "
        "folder or the tau2 root) or llmbar (one file or the LLMBar folder). Writes to OUT, "
        "or to stdout with nothing else on it. Then import it with: "
        "python manage.py import_jsonl OUT --project SLUG --create"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", choices=SOURCES, help="Data set format.")
        parser.add_argument("path", type=Path, help="Data set file or folder.")
        parser.add_argument(
            "-o", "--output", type=Path, metavar="OUT", help="JSONL file (default: stdout)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        skips = SkipCounts()
        try:
            records = convert(options["source"], options["path"], skips)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        output: Path | None = options["output"]
        if output is None:
            count = jsonl_write(records, self.stdout)
        else:
            try:
                with output.open("w", encoding="utf-8") as out:
                    count = jsonl_write(records, out)
            except OSError as exc:
                raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from exc
        # Summary on stderr, so stdout stays pure JSONL.
        summary = f"{count} records written to {output or 'stdout'}"
        if skips.total():
            summary += (
                f"; pairs skipped: {skips.identical_outputs} identical outputs, "
                f"{skips.duplicates} duplicates, {skips.conflicts} conflicting labels"
            )
        self.stderr.write(summary, style_func=self.style.SUCCESS)
