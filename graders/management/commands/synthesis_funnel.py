"""``manage.py synthesis_funnel --project SLUG [--synthesis ID] [--json]``: the funnel of one
synthesis (FORMATS.md; paper Tables 1 and 8, cost per kept pair, the position audit)."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from graders.synthesis.cli import synthesis_arguments, synthesis_or_error
from graders.synthesis.funnel_selectors import synthesis_funnel_json


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return f"{value:.3f}" if isinstance(value, float) else str(value)


class Command(BaseCommand):
    help = "The funnel of a synthesis: draws, kept and rejected per retry and per subset."

    def add_arguments(self, parser: CommandParser) -> None:
        synthesis_arguments(parser)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        synthesis = synthesis_or_error(options)
        report = synthesis_funnel_json(synthesis=synthesis)
        if options["json"]:
            self.stdout.write(json.dumps(report, allow_nan=False))
            return
        self._table(report)

    def _rows(self, columns: list[str], rows: list[dict[str, Any]]) -> None:
        self.stdout.write("\t".join(columns))
        for row in rows:
            self.stdout.write("\t".join(_cell(row.get(c)) for c in columns))

    def _table(self, report: dict[str, Any]) -> None:
        if report["note"]:
            self.stdout.write(report["note"])
        self.stdout.write(
            f"Synthesis {report['synthesis']}: {report['cells']} cells, {report['draws']} "
            f"draws, {report['kept']} kept; cost per kept pair {_cell(report['cost_per_kept'])}"
        )
        retry = ["retry", "draws", "kept", "rejected", "failed", "retention",
                 "cumulative_retention"]  # fmt: skip
        self._rows(retry, [*report["by_retry"], {"retry": "total", **report["total"]}])
        for axis, rows in report["by"].items():
            self.stdout.write(f"By {axis}")
            self._rows(["value", "cells", "filled", "draws", "retention",
                        "cumulative_retention", "draws_per_kept"], rows)  # fmt: skip
        if report["stages"]:
            self._rows(["stage", "calls", "tokens", "calls_per_kept", "tokens_per_kept"],
                       report["stages"])  # fmt: skip
        self.stdout.write("Position audit (better response in slot 2)")
        self._rows(["axis", "value", "votes", "better_in_slot_2", "share", "p_value"],
                   report["position"])  # fmt: skip
