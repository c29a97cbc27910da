"""``manage.py local_judge [--port 8089] [--threads 2]``: the offline demo judge, in the
foreground, on 127.0.0.1 (graders/local_judge.py)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graders.local_judge import LocalJudgeUnavailable, local_judge_serve


class Command(BaseCommand):
    help = "Serve SmolLM2-135M-Instruct as an OpenAI-compatible judge on 127.0.0.1 until stopped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8089)
        parser.add_argument("--threads", type=int, default=2)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            local_judge_serve(port=options["port"], threads=options["threads"])
        except LocalJudgeUnavailable as error:
            raise CommandError(str(error)) from error
