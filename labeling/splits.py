"""Assigning tasks to the meta / selection / train / eval splits, stratified by domain."""

import math
import random
from collections import defaultdict

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


def splits_assign(
    *,
    project: Project,
    fractions: dict[str, float],
    seed: int = 0,
    holdout_domains: tuple[str, ...] = (),
) -> dict[str, dict[str, int]]:
    """Assign every task of the project to a split and return counts per domain and split.

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
    by_domain: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for pk, external_id, domain in (
        Task.objects.filter(project=project)
        .values_list("pk", "external_id", "domain")
        .order_by("external_id")
    ):
        by_domain[domain].append((pk, external_id))
    missing = set(holdout_domains) - set(by_domain)
    if missing:
        raise SplitFractionsInvalid(f"no tasks in held-out domain(s): {', '.join(sorted(missing))}")
    assignment: dict[str, list[int]] = defaultdict(list)
    table: dict[str, dict[str, int]] = {}
    for domain, tasks in sorted(by_domain.items()):
        pks = [pk for pk, _ in tasks]
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
    with transaction.atomic():
        for split, pks in assignment.items():
            for chunk_start in range(0, len(pks), 5000):
                Task.objects.filter(pk__in=pks[chunk_start : chunk_start + 5000]).update(
                    split=split
                )
    return table
