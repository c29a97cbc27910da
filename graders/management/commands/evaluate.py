"""``manage.py evaluate --project SLUG --grader ID [--split eval] [--json]``."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.evaluation import grading_evaluate, metric_text
from graders.models import GradingRun
from labeling.cli import project_or_error
from labeling.models import JobStatus


def _metric(value: Any) -> str:
    return metric_text(value) if isinstance(value, dict) else "-"


class Command(BaseCommand):
    help = "Agreement with the experts of a grader's latest finished run on a split."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--grader", required=True, type=int, metavar="ID")
        parser.add_argument("--split", default="eval")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        if not project.metagraders.filter(pk=options["grader"]).exists():
            raise CommandError(f"grader {options['grader']} is not in project {project.slug!r}")
        run = (
            GradingRun.objects.filter(
                project=project,
                metagrader_id=options["grader"],
                split=options["split"],
                job__status=JobStatus.SUCCEEDED,
            )
            .order_by("-created_at")
            .first()
        )
        if run is None:
            raise CommandError(
                f"grader {options['grader']} has no finished run on split {options['split']!r}; "
                f"start one with: python manage.py grade --project {project.slug} "
                f"--grader {options['grader']} --split {options['split']}"
            )
        report = {"run": run.pk, "grader": run.metagrader_id, "split": run.split,
                  **grading_evaluate(run=run)}  # fmt: skip
        if options["json"]:
            self.stdout.write(json.dumps(report, allow_nan=False))
            return
        self.stdout.write(
            f"run {run.pk}: {report['graded']} responses graded, {report['failed']} failed; "
            f"reference {report.get('reference')}"
        )
        for name in ("ranking_accuracy", "tolerant_ranking_accuracy", "harm_aware_accuracy",
                     "within_task_spearman"):  # fmt: skip
            if name in report:
                self.stdout.write(f"  {name}: {_metric(report[name])}")
