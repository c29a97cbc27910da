"""``manage.py synthesis_sweep --project SLUG --synthesis ID (--judge ENDPOINT_ID ... | --grader
ID ...) [--grader-endpoint ENDPOINT_ID] [--runs 3] [--max-calls N] [--max-cost USD] [--wait]``:
score each response of a synthesis's kept pairs with judge endpoints (the evaluator prompt)
and scalar graders (their own program, on --grader-endpoint or the project's default), as a
background job; `meta_eval` then ranks them. ``--resume SWEEP [--max-calls N] [--max-cost USD]
[--wait]`` goes on with a stopped sweep, its budget raised (totals, what it spent included) or
kept."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.forms import ResumeBudgetForm
from graders.models import JudgeEndpoint, Metagrader, SynthesisSweep
from graders.synthesis.sweep import DEFAULT_RUNS, SweepInvalid, sweep_resume, sweep_start
from labeling.cli import (
    budget_arguments,
    budget_given,
    form_or_error,
    job_announce,
    job_follow,
    project_or_error,
    resumable_check,
    resume_target_or_error,
)
from labeling.models import Project


def _endpoint(project: Project, pk: int) -> JudgeEndpoint:
    endpoint = JudgeEndpoint.objects.filter(project=project, pk=pk).first()
    if endpoint is None:
        raise CommandError(f"judge endpoint {pk} is not in project {project.slug!r}")
    return endpoint


class Command(BaseCommand):
    help = "Sweep evaluators over a synthesis's kept pairs (n runs each); --wait follows it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        start = parser.add_mutually_exclusive_group(required=True)
        start.add_argument("--synthesis", metavar="ID")
        start.add_argument("--resume", type=int, metavar="SWEEP", help="a stopped sweep's id")
        parser.add_argument("--judge", type=int, nargs="+", default=[], metavar="ENDPOINT_ID")
        parser.add_argument("--grader", type=int, nargs="+", default=[], metavar="ID")
        parser.add_argument("--grader-endpoint", type=int, metavar="ENDPOINT_ID")
        parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
        budget_arguments(parser)
        parser.add_argument("--wait", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        resumed = options["resume"] is not None
        sweep = self._resume(project, options) if resumed else self._start(project, options)
        job_announce(self.stdout, f"Sweep {sweep.pk}", sweep.job_id, resumed=resumed)
        if options["wait"]:
            job_follow(
                self.stderr,
                sweep.job_id,
                lambda job: f"{job.status}: {job.done}/{job.total or '?'} scores",
                f"sweep {sweep.pk}",
            )

    def _start(self, project: Project, options: dict[str, Any]) -> SynthesisSweep:
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
            return sweep_start(
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

    def _resume(self, project: Project, options: dict[str, Any]) -> SynthesisSweep:
        sweep = resume_target_or_error(SynthesisSweep, project, options["resume"], "sweep")
        if options["judge"] or options["grader"] or options["grader_endpoint"] is not None:
            raise CommandError(
                "--resume goes on with the sweep's own evaluators: leave out --judge, --grader "
                "and --grader-endpoint"
            )
        resumable_check(sweep.job, "sweep", sweep.pk)
        form = ResumeBudgetForm(budget_given(options), limits=sweep, spent=sweep.usage)
        sweep_resume(sweep=sweep, **form_or_error(form))
        return sweep
