"""``manage.py agreement --project SLUG [--dimension NAME] [--json]`` (FORMATS.md)."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from labeling.agreement_stats import tally_report
from labeling.cli import dimension_check, project_or_error
from labeling.selectors import agreement_tally


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


class Command(BaseCommand):
    help = "Agreement between annotators and of each label provider with the human majority."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--dimension", metavar="NAME")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        dimension = options["dimension"]
        dimension_check(project, dimension)
        report = tally_report(agreement_tally(project=project), dimension=dimension)
        if options["json"]:
            self.stdout.write(json.dumps(report, allow_nan=False))
            return
        self.stdout.write(
            f"{report['pairs']} pairs, {report['annotators']} annotators; "
            f"Krippendorff's alpha {_number(report['krippendorff_alpha'])}, "
            f"unanimous {_number(report['unanimous_share'])} "
            f"(over {report['overlap_pairs']} pairs with 2+ human labels)"
        )
        for row in report["cohen_kappa"]:
            self.stdout.write(
                f"  kappa {row['a']} vs {row['b']}: {_number(row['kappa'])} "
                f"(raw agreement {_number(row['agreement'])}, n={row['n']})"
            )
        for row in report["providers"]:
            self.stdout.write(
                f"  {row['provider']} vs {row['vs']}: {_number(row['agreement'])} (n={row['n']})"
            )
