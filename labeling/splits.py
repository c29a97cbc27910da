"""Assigning tasks to the meta / selection / train / eval splits, stratified by domain."""

import hashlib
import math
import random
from collections import Counter, defaultdict
from dataclasses import dataclass

from django.db import transaction

from labeling.models import Project, Split, Task

SPLIT_ORDER = (Split.META, Split.SELECTION, Split.TRAIN, Split.EVAL)


class SplitFractionsInvalid(ValueError):
    pass


def split_counts_allocate(n: int, fractions: dict[str, float]) -> dict[str, int]:
    """Largest-remainder allocation of n tasks: floor(n * f) each, then one more to the splits
    with the largest remainders (earlier splits first on equal remainders), summing to n."""
    exact = {split: n * fractions.get(split, 0.0) for split in SPLIT_ORDER}
    counts = {split: math.floor(value) for split, value in exact.items()}
    left = n - sum(counts.values())
    by_remainder = sorted(
        SPLIT_ORDER, key=lambda s: (-(exact[s] - counts[s]), SPLIT_ORDER.index(s))
    )
    for split in by_remainder[:left]:
        counts[split] += 1
    return counts


@dataclass(frozen=True)
class SplitPlan:
    """What an assignment would do: every task's new split, the counts per domain and split,
    and how many tasks move from which split to which. `token` is a digest of every task's
    current and new split, so a confirmation names exactly this change: if the tasks or their
    splits change in between, the plan made again has another token."""

    assignment: dict[str, list[int]]
    table: dict[str, dict[str, int]]
    moves: dict[tuple[str, str], int]
    tasks: int
    token: str

    @property
    def moved(self) -> int:
        return sum(self.moves.values())

    @property
    def unchanged(self) -> int:
        return self.tasks - self.moved


def splits_plan(
    *,
    project: Project,
    fractions: dict[str, float],
    seed: int = 0,
    holdout_domains: tuple[str, ...] = (),
) -> SplitPlan:
    """Plan the assignment of every task of the project to a split; nothing is written.

    Within each domain the tasks (in id order) are shuffled with a generator seeded by the seed
    and the domain name, so adding a domain does not reshuffle the others. Held-out domains go
    wholly to eval, so a grader can be reported on a domain it never saw.
    """
    if any(value < 0 for value in fractions.values()) or not math.isclose(
        sum(fractions.values()), 1.0, abs_tol=1e-6
    ):
        raise SplitFractionsInvalid("split fractions must be non-negative and add up to 1")
    unknown = set(fractions) - set(SPLIT_ORDER)
    if unknown:
        raise SplitFractionsInvalid(f"unknown split(s): {', '.join(sorted(unknown))}")
    by_domain: dict[str, list[int]] = defaultdict(list)
    current: dict[int, str] = {}
    for pk, domain, split in (
        Task.objects.filter(project=project)
        .values_list("pk", "domain", "split")
        .order_by("external_id")
    ):
        by_domain[domain].append(pk)
        current[pk] = split
    missing = set(holdout_domains) - set(by_domain)
    if missing:
        raise SplitFractionsInvalid(f"no tasks in held-out domain(s): {', '.join(sorted(missing))}")
    assignment: dict[str, list[int]] = defaultdict(list)
    table: dict[str, dict[str, int]] = {}
    for domain, pks in sorted(by_domain.items()):
        if domain in holdout_domains:
            counts = {split: 0 for split in SPLIT_ORDER} | {Split.EVAL: len(pks)}
        else:
            random.Random(f"{seed}:{domain}").shuffle(pks)
            counts = split_counts_allocate(len(pks), fractions)
        start = 0
        for split in SPLIT_ORDER:
            assignment[split].extend(pks[start : start + counts[split]])
            start += counts[split]
        table[domain] = {str(split): counts[split] for split in SPLIT_ORDER}
    new = {pk: str(split) for split, pks in assignment.items() for pk in pks}
    moves = Counter((current[pk], split) for pk, split in new.items() if current[pk] != split)
    digest = hashlib.sha256(f"project {project.pk}\n".encode())
    for pk in sorted(new):
        digest.update(f"{pk} {current[pk]} {new[pk]}\n".encode())
    return SplitPlan(
        assignment=dict(assignment),
        table=table,
        moves=dict(sorted(moves.items(), key=_move_order)),
        tasks=len(new),
        token=digest.hexdigest()[:32],
    )


def _move_order(move: tuple[tuple[str, str], int]) -> tuple[int, int]:
    order = (Split.UNASSIGNED, *SPLIT_ORDER)
    (before, after), _ = move
    return (order.index(before), order.index(after))


def splits_apply(*, plan: SplitPlan) -> None:
    """Write a plan's assignment."""
    with transaction.atomic():
        for split, pks in plan.assignment.items():
            for chunk_start in range(0, len(pks), 5000):
                Task.objects.filter(pk__in=pks[chunk_start : chunk_start + 5000]).update(
                    split=split
                )


def splits_assign(
    *,
    project: Project,
    fractions: dict[str, float],
    seed: int = 0,
    holdout_domains: tuple[str, ...] = (),
) -> dict[str, dict[str, int]]:
    """Assign every task of the project to a split at once (the API and the command, which are
    asked explicitly) and return the counts per domain and split; see splits_plan."""
    plan = splits_plan(
        project=project, fractions=fractions, seed=seed, holdout_domains=holdout_domains
    )
    splits_apply(plan=plan)
    return plan.table
