"""``manage.py drift --project SLUG --grader ID [--json] [--window-days D] [--step-bucket N]``."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.drift import (
    DEFAULT_STEP_BUCKET,
    DEFAULT_WINDOW_DAYS,
    DriftInvalid,
    drift_report,
    report_warnings,
)
from labeling.cli import project_or_error

JSON_SHAPE = """
--json prints one object (docs/drift.md): grader {id, name, kind}; selection {search, snapshot,
since, accuracy {value, ci} or null}; metric, tolerance, window_days, step_bucket, margin,
min_pairs; overall {value, ci [low, high] or null, pairs, tasks} or null; windows [{start, end,
value, ci, pairs, tasks}]; buckets [{first_step, last_step, accuracy (as overall) or null,
mean_reward, rewards}]; alert; reward_rho; agreement_rho; hacking; not_scored {count, pairs
[{winner, loser, reason}], note}; summary (false here).
"""


def _figure(accuracy: dict[str, Any] | None) -> str:
    if accuracy is None:
        return "-"
    ci = accuracy.get("ci")
    interval = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "(no interval)"
    counted = f" over {accuracy['pairs']} pairs" if "pairs" in accuracy else ""
    return f"{accuracy['value']:.3f} {interval}{counted}"


class Command(BaseCommand):
    help = (
        "Ranking accuracy of a promoted grader on expert labels newer than its selection "
        "snapshot, per time window and step bucket, against its accuracy at selection." + JSON_SHAPE
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--grader", required=True, type=int, metavar="ID")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--window-days", type=float, default=DEFAULT_WINDOW_DAYS, metavar="D")
        parser.add_argument("--step-bucket", type=int, default=DEFAULT_STEP_BUCKET, metavar="N")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        grader = project.metagraders.filter(pk=options["grader"]).first()
        if grader is None:
            raise CommandError(f"grader {options['grader']} is not in project {project.slug!r}")
        try:
            report = drift_report(
                grader=grader,
                window_days=options["window_days"],
                step_bucket=options["step_bucket"],
            )
        except DriftInvalid as error:
            raise CommandError(str(error)) from error
        if options["json"]:
            self.stdout.write(json.dumps(report, allow_nan=False))
            return
        self._text(report)

    def _text(self, report: dict[str, Any]) -> None:
        selection = report["selection"]
        write = self.stdout.write
        write(f"grader {report['grader']['id']} {report['grader']['name']}")
        if selection["search"] is None:
            write("  no search ranked this grader: every label is fresh, nothing to compare")
        else:
            write(
                f"  selected by search {selection['search']} on snapshot {selection['snapshot']}"
                f" ({selection['since']}): {_figure(selection['accuracy'])}"
            )
        write(f"  fresh: {_figure(report['overall'])}")
        write(f"  windows of {report['window_days']:g} days:")
        for window in report["windows"]:
            write(f"    {window['start']}  {_figure(window)}")
        write(f"  step buckets of {report['step_bucket']}:")
        write("    steps            fresh accuracy                    mean reward")
        for bucket in report["buckets"]:
            reward = "-" if bucket["mean_reward"] is None else f"{bucket['mean_reward']:.3f}"
            steps = f"{bucket['first_step']}-{bucket['last_step']}"
            write(f"    {steps:<16} {_figure(bucket['accuracy']):<33} {reward}")
        write(f"  not scored: {report['not_scored']['count']} fresh pairs")
        for warning in report_warnings(report) or ["no alert"]:
            write(f"  {warning}")
