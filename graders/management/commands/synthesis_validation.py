"""``manage.py synthesis_validation --project SLUG [--synthesis ID] [--json]``: PADME Table 2."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.synthesis.cli import synthesis_arguments, synthesis_or_error
from graders.synthesis.validation_selectors import synthesis_pick, synthesis_validation_json


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return f"[{value[0]:.3f}, {value[1]:.3f}]"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


class Command(BaseCommand):
    help = (
        "Human validation of a synthesis: per filter depth, the pairs, yield, synthetic-label "
        "accuracy against the human majority (95% interval) and Krippendorff's alpha, and the "
        "label validity among each judge's rejects."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        synthesis_arguments(parser)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        synthesis = synthesis_or_error(options, pick=synthesis_pick)
        try:
            document = synthesis_validation_json(synthesis=synthesis)
        except ValueError as exc:  # rows no writer should leave, e.g. votes after a veto
            raise CommandError(f"synthesis {synthesis.external_id!r}: {exc}") from exc
        if options["json"]:
            self.stdout.write(json.dumps(document, allow_nan=False))
            return
        if not document["depths"][0]["pairs"]:
            self.stdout.write(f"No validation sample yet for synthesis {synthesis.external_id!r}.")
            return
        columns = ["depth", "pairs", "yield", "accuracy", "ci", "krippendorff_alpha"]
        self.stdout.write("\t".join(columns))
        for row in document["depths"]:
            self.stdout.write("\t".join(_cell(row[c]) for c in columns))
        self.stdout.write("\t".join(["rejected_by", "pairs", "accuracy"]))
        for row in document["rejected_by"]:
            self.stdout.write("\t".join(_cell(row[c]) for c in ("judge", "pairs", "accuracy")))
