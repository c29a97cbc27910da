"""``manage.py synthesize --project SLUG [--dimension NAME ...] [--split S | --domain D]
--agent ENDPOINT [...] --writer ENDPOINT --judge ENDPOINT [...] [--retries 2] [--seed 0]
[--max-calls N] [--max-cost USD] [--mode single|conversation|harness|webhook]
[--user-simulator ENDPOINT] [--turn-cap N] [--webhook-url URL] [--name ID] [--wait]``.

An ENDPOINT is a judge endpoint of the project, by name (or by id). The judges are the filter
cascade in the order given. Without --dimension, every dimension of the project."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.models import JudgeEndpoint, RolloutMode
from graders.synthesis.runs import SynthesisInvalid, synthesis_start
from labeling.cli import budget_arguments, job_announce, job_follow, project_or_error
from labeling.models import Project


def _endpoint(project: Project, ref: str, flag: str) -> JudgeEndpoint:
    endpoints = JudgeEndpoint.objects.filter(project=project)
    endpoint = endpoints.filter(name=ref).first()
    if endpoint is None and ref.isdigit():
        endpoint = endpoints.filter(pk=int(ref)).first()
    if endpoint is None:
        raise CommandError(f"{flag}: project {project.slug!r} has no endpoint {ref!r}")
    return endpoint


class Command(BaseCommand):
    help = "Start a synthesis run (steered pairs through a filter cascade) as a background job."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        parser.add_argument("--dimension", action="append", default=[], metavar="NAME")
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--split", default="")
        scope.add_argument("--domain", default="")
        parser.add_argument("--agent", action="append", required=True, metavar="ENDPOINT")
        parser.add_argument("--writer", required=True, metavar="ENDPOINT")
        parser.add_argument("--judge", action="append", required=True, metavar="ENDPOINT")
        parser.add_argument("--retries", type=int, default=2)
        parser.add_argument("--seed", type=int, default=0)
        budget_arguments(parser)
        parser.add_argument("--mode", choices=RolloutMode.values, default=RolloutMode.SINGLE)
        parser.add_argument("--user-simulator", metavar="ENDPOINT")
        parser.add_argument("--turn-cap", type=int, default=8)
        parser.add_argument("--webhook-url", default="")
        parser.add_argument("--name", default="", metavar="ID", help="the synthesis id")
        parser.add_argument("--wait", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        dimensions = list(project.dimensions.all())
        if options["dimension"]:
            by_name = {d.name: d for d in dimensions}
            missing = [n for n in options["dimension"] if n not in by_name]
            if missing:
                raise CommandError(f"project {project.slug!r} has no dimension {missing[0]!r}")
            dimensions = [by_name[n] for n in dict.fromkeys(options["dimension"])]
        simulator = options["user_simulator"]
        try:
            run = synthesis_start(
                project=project,
                dimensions=dimensions,
                agents=[_endpoint(project, a, "--agent") for a in options["agent"]],
                writer=_endpoint(project, options["writer"], "--writer"),
                judges=[_endpoint(project, j, "--judge") for j in options["judge"]],
                name=options["name"],
                split=options["split"],
                domain=options["domain"],
                retries=options["retries"],
                mode=options["mode"],
                user_simulator=_endpoint(project, simulator, "--user-simulator")
                if simulator
                else None,
                turn_cap=options["turn_cap"],
                webhook_url=options["webhook_url"],
                seed=options["seed"],
                max_calls=options["max_calls"],
                max_cost=options["max_cost"],
            )
        except SynthesisInvalid as exc:
            raise CommandError(str(exc)) from None
        cells = run.synthesis.cells.count()
        what = f"Synthesis run {run.pk} ({run.synthesis.external_id}, {cells} cells)"
        job_announce(self.stdout, what, run.job_id, resumed=False)
        if options["wait"]:
            job_follow(
                self.stderr,
                run.job_id,
                lambda job: f"{job.status}: {job.stage or 'queued'}",
                f"run {run.pk}",
            )
