"""``manage.py grade --project SLUG --grader ID [--split S | --task ID ...] [--endpoint NAME]
[--max-calls N] [--max-cost USD] [--wait]``, or ``manage.py grade --project SLUG --resume RUN
[--max-calls N] [--max-cost USD] [--wait]`` to go on with a stopped run, with its budget
raised (totals for the run, what it spent included) or kept."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.forms import ResumeBudgetForm
from graders.grading import grading_run_resume
from graders.models import GradingRun, JudgeEndpoint
from graders.services import RunInvalid, grading_run_start
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


class Command(BaseCommand):
    help = (
        "Grade a split (or tasks) with a grader as a background job, or resume a stopped run "
        "(--resume); --wait follows it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        start = parser.add_mutually_exclusive_group(required=True)
        start.add_argument("--grader", type=int, metavar="ID")
        start.add_argument("--resume", type=int, metavar="RUN", help="a stopped run's id")
        parser.add_argument("--split", default="")
        parser.add_argument("--task", nargs="*", default=[], metavar="ID")
        parser.add_argument("--endpoint", metavar="NAME", help="default: the project's default")
        budget_arguments(parser)
        parser.add_argument("--wait", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        resumed = options["resume"] is not None
        run = self._resume(project, options) if resumed else self._start(project, options)
        job_announce(self.stdout, f"Grading run {run.pk}", run.job_id, resumed=resumed)
        if options["wait"]:
            job_follow(
                self.stderr,
                run.job_id,
                lambda job: f"{job.status}: {job.done}/{job.total or '?'} tasks",
                f"run {run.pk}",
            )

    def _start(self, project: Project, options: dict[str, Any]) -> GradingRun:
        grader = project.metagraders.filter(pk=options["grader"]).first()
        if grader is None:
            raise CommandError(f"grader {options['grader']} is not in project {project.slug!r}")
        endpoints = JudgeEndpoint.objects.filter(project=project)
        endpoint = (
            endpoints.filter(name=options["endpoint"]).first()
            if options["endpoint"]
            else endpoints.filter(is_default=True).first()
        )
        if endpoint is None:
            raise CommandError("no such judge endpoint (and no default one) in this project")
        try:
            return grading_run_start(
                project=project,
                metagrader=grader,
                endpoint=endpoint,
                split=options["split"],
                task_ids=options["task"] or None,
                max_calls=options["max_calls"],
                max_cost=options["max_cost"],
            )
        except RunInvalid as exc:
            raise CommandError(str(exc)) from None

    def _resume(self, project: Project, options: dict[str, Any]) -> GradingRun:
        run = resume_target_or_error(GradingRun, project, options["resume"], "run")
        if options["split"] or options["task"] or options["endpoint"]:
            raise CommandError(
                "--resume goes on with the run's own tasks and judge: leave out --split, --task "
                "and --endpoint"
            )
        resumable_check(run.job, "run", run.pk)
        form = ResumeBudgetForm(budget_given(options), limits=run, spent=run.usage)
        grading_run_resume(run=run, **form_or_error(form))
        return run
