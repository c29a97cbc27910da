"""``manage.py load_demo [--judge-url URL]``: the demo project, users, baseline graders, the
generated rubrics of its rubric review and the local demo judge endpoint, created once; and the
demo synthesis (mechanics only), imported when the project does not hold it."""

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.services import baselines_ensure, endpoint_settings, local_demo_endpoint_ensure
from labeling.demo import (
    DEMO_PASSWORD,
    DEMO_SYNTHESIS_NOTE,
    DEMO_USERS,
    DemoRefused,
    demo_load,
    demo_synthesis_load,
)
from reviews.demo import demo_rubrics_load


class Command(BaseCommand):
    help = (
        "Create the demo project and its users (admin, expert, reviewer: project members, not "
        "staff) once. Needs DEBUG on: their password is published."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--judge-url",
            default="http://127.0.0.1:8089/v1",
            help="Base URL of the local demo judge (manage.py local_judge).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            project, created = demo_load()
        except DemoRefused as exc:
            raise CommandError(str(exc)) from None
        baselines_ensure(project=project)
        if created:
            demo_rubrics_load(project=project)
        synthesis_added = demo_synthesis_load(project=project)
        endpoint = local_demo_endpoint_ensure(project=project, base_url=options["judge_url"])
        try:
            endpoint_settings(endpoint)
        except ValidationError as exc:
            self.stderr.write(
                f"The demo judge at {endpoint.base_url} cannot be called with these settings "
                f"(make run allows it): {' '.join(exc.messages)}"
            )
        self.stdout.write(
            f"Demo project {project.slug!r} {'created' if created else 'already present'}."
        )
        if synthesis_added:
            self.stdout.write(f"{DEMO_SYNTHESIS_NOTE}: imported.")
        for username, role in DEMO_USERS:
            self.stdout.write(f"  {role:<9} login: {username} / {DEMO_PASSWORD}")
