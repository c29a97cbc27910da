"""``manage.py synthesis_sweep --project SLUG --synthesis ID (--judge ENDPOINT_ID ... | --grader
ID ...) [--grader-endpoint ENDPOINT_ID] [--runs 3] [--max-calls N] [--max-cost USD] [--wait]``:
score each response of a synthesis's kept pairs with judge endpoints (the evaluator prompt)
and scalar graders (their own program, on --grader-endpoint or the project's default), as a
background job; `meta_eval` then ranks them."""

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.models import JudgeEndpoint, Metagrader
from graders.synthesis.sweep import DEFAULT_RUNS, SweepInvalid, sweep_start
from labeling.cli import project_or_error
from labeling.models import Job, Project


def _endpoint(project: Project, pk: int) -> JudgeEndpoint:
    endpoint = JudgeEndpoint.objects.filter(project=project, pk=pk).first()
    if endpoint is None:
        raise CommandError(f"judge endpoint {pk} is not in project {project.slug!r}")
    return endpoint


class Command(BaseCommand):
    help = "Sweep evaluators over a synthesis's kept pairs (n runs each); --wait follows it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--synthesis", required=True, metavar="ID")
        parser.add_argument("--judge", type=int, nargs="+", default=[], metavar="ENDPOINT_ID")
        parser.add_argument("--grader", type=int, nargs="+", default=[], metavar="ID")
        parser.add_argument("--grader-endpoint", type=int, metavar="ENDPOINT_ID")
        parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
        parser.add_argument("--max-calls", type=int)
        parser.add_argument("--max-cost", type=float)
        parser.add_argument("--wait", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        synthesis = project.syntheses.filter(external_id=options["synthesis"]).first()
        if synthesis is None:
            raise CommandError(
                f"synthesis {options['synthesis']!r} is not in project {project.slug!r}"
            )
        if not options["judge"] and not options["grader"]:
            raise CommandError("give --judge ENDPOINT_ID ... or --grader ID ... (or both)")
        graders = []
        for pk in options["grader"]:
            grader = Metagrader.objects.filter(project=project, pk=pk).first()
            if grader is None:
                raise CommandError(f"grader {pk} is not in project {project.slug!r}")
            graders.append(grader)
        try:
            sweep = sweep_start(
                synthesis=synthesis,
                judges=[_endpoint(project, pk) for pk in options["judge"]],
                graders=graders,
                grader_endpoint=(
                    _endpoint(project, options["grader_endpoint"])
                    if options["grader_endpoint"] is not None
                    else None
                ),
                runs=options["runs"],
                max_calls=options["max_calls"],
                max_cost=options["max_cost"],
            )
        except SweepInvalid as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Sweep {sweep.pk} queued as job {sweep.job_id}.")
        if not options["wait"]:
            return
        shown = ""
        while True:
            job = Job.objects.get(pk=sweep.job_id)
            line = f"{job.status}: {job.done}/{job.total or '?'} scores"
            if line != shown:
                self.stderr.write(line)
                shown = line
            if not job.is_active:
                break
            time.sleep(1)
        if job.status != "succeeded":
            raise CommandError(f"sweep {sweep.pk}: {job.get_status_display()}. {job.error}")
