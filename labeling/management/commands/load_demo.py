"""``manage.py load_demo``: the demo project and users, created once."""

from typing import Any

from django.core.management.base import BaseCommand

from labeling.demo import DEMO_PASSWORD, DEMO_USERS, demo_load


class Command(BaseCommand):
    help = "Create the demo project and the demo users (admin, expert, reviewer) once."

    def handle(self, *args: Any, **options: Any) -> None:
        project, created = demo_load()
        self.stdout.write(
            f"Demo project {project.slug!r} {'created' if created else 'already present'}."
        )
        for username, role in DEMO_USERS:
            self.stdout.write(f"  {role:<9} login: {username} / {DEMO_PASSWORD}")
