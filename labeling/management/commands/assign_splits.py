"""``manage.py assign_splits --project SLUG [--meta F --selection F --train F --eval F]
[--seed N] [--holdout DOMAIN ...] [--json]``."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from labeling.cli import project_or_error
from labeling.splits import SplitFractionsInvalid, splits_assign


class Command(BaseCommand):
    help = "Assign tasks to meta/selection/train/eval, stratified by domain, and print the counts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, metavar="SLUG")
        for split, default in (("meta", 0.2), ("selection", 0.2), ("train", 0.4), ("eval", 0.2)):
            parser.add_argument(f"--{split}", type=float, default=default, metavar="FRACTION")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--holdout", nargs="*", default=[], metavar="DOMAIN")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        fractions = {s: options[s] for s in ("meta", "selection", "train", "eval")}
        try:
            table = splits_assign(
                project=project,
                fractions=fractions,
                seed=options["seed"],
                holdout_domains=tuple(options["holdout"]),
            )
        except SplitFractionsInvalid as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(table))
            return
        self.stdout.write(f"{'domain':<24}{'meta':>8}{'selection':>11}{'train':>8}{'eval':>8}")
        for domain, row in table.items():
            self.stdout.write(
                f"{domain or '(none)':<24}{row['meta']:>8}{row['selection']:>11}"
                f"{row['train']:>8}{row['eval']:>8}"
            )
