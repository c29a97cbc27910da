"""``manage.py meta_eval --project SLUG [--dimension NAME] [--reference synthetic] [--json]``."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from graders.evaluation import meta_eval_rows
from labeling.cli import dimension_check, project_or_error
from labeling.models import Provider


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value >= 0.001 or value <= 0 else f"{value:.1e}"
    return str(value)


class Command(BaseCommand):
    help = "Meta-evaluate judges: how often their pointwise scores order labeled pairs correctly."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--dimension", metavar="NAME")
        parser.add_argument("--reference", choices=Provider.values, default=Provider.SYNTHETIC)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        dimension = options["dimension"]
        dimension_check(project, dimension)
        report = meta_eval_rows(
            project=project, reference=options["reference"], dimension=dimension
        )
        if options["json"]:
            self.stdout.write(json.dumps(report, allow_nan=False))
            return
        if not report["rows"]:
            self.stdout.write(
                f"No judge scores on pairs labeled by provider {options['reference']!r}."
            )
            return
        columns = ["judge", "dimension", "pairs", "runs", "accuracy", "accuracy_when_committed",
                   "tie_rate", "leniency", "score_sd", "distinct_scores", "stable", "always_tied",
                   "wobbled", "flipped", "failed_runs"]  # fmt: skip
        self.stdout.write("\t".join(columns))
        for row in report["rows"] + report["by_dimension"]:
            self.stdout.write("\t".join(_cell(row[c]) for c in columns))
        correlations = report["correlations"]
        self.stdout.write(f"\nAccuracy across {correlations['evaluators']} evaluators against:")
        self.stdout.write("factor\tn\trho\tp\tp_holm")
        for factor in correlations["factors"]:
            cells = [factor[key] for key in ("factor", "n", "rho", "p", "p_holm")]
            self.stdout.write("\t".join(_cell(cell) for cell in cells))
        self.stdout.write(correlations["method"] + ".")
