"""``manage.py grade --project SLUG --grader ID [--split S | --task ID ...] [--endpoint NAME]
[--max-calls N] [--max-cost USD] [--wait]``."""

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.models import JudgeEndpoint
from graders.services import RunInvalid, grading_run_start
from labeling.cli import project_or_error
from labeling.models import Job


class Command(BaseCommand):
    help = "Grade a split (or tasks) with a grader as a background job; --wait follows it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--grader", required=True, type=int, metavar="ID")
        parser.add_argument("--split", default="")
        parser.add_argument("--task", nargs="*", default=[], metavar="ID")
        parser.add_argument("--endpoint", metavar="NAME", help="default: the project's default")
        parser.add_argument("--max-calls", type=int)
        parser.add_argument("--max-cost", type=float)
        parser.add_argument("--wait", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
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
            run = grading_run_start(
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
        self.stdout.write(f"Grading run {run.pk} queued as job {run.job_id}.")
        if not options["wait"]:
            return
        shown = ""
        while True:
            job = Job.objects.get(pk=run.job_id)
            line = f"{job.status}: {job.done}/{job.total or '?'} tasks"
            if line != shown:
                self.stderr.write(line)
                shown = line
            if not job.is_active:
                break
            time.sleep(1)
        if job.status != "succeeded":
            raise CommandError(f"run {run.pk} {job.status}: {job.error}")
