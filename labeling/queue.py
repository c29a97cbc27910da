"""The labeling queue: building it, claiming the next pair, and taking labels back.

Concurrency: a claim picks the best free slot with SELECT ... FOR UPDATE SKIP LOCKED (so
concurrent annotators on PostgreSQL pass over each other's rows instead of waiting), then takes
it with a conditional UPDATE whose row count proves the claim. On SQLite, where FOR UPDATE is a
no-op, the IMMEDIATE transaction serializes writers and the conditional UPDATE still decides.
A lease of minutes frees the slots of annotators who walk away.

Priorities come from the project's queue strategy (labeling.strategies) and are rewritten in the
background (queue_refresh, every `queue_refresh_labels` new labels and after each search round),
never per request; a slot carries its pair's rank and selection chance, so a claim records the
chance without reading the pair, and the label keeps it for the reweighted estimates.
"""

import itertools
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Max, OuterRef, Q, Subquery
from django.utils import timezone

from labeling.imports import preference_same
from labeling.models import (
    Annotator,
    Dimension,
    Preference,
    Project,
    Provider,
    QueueAssignment,
    QueuePair,
    QueueSlot,
    Response,
    SynthesisDraw,
    Task,
)
from labeling.signals import label_submitted
from labeling.strategies import (
    CandidatePair,
    PairsWithinGroups,
    QueueStrategy,
    strategy_for,
    strategy_specs,
)

LEASE = timedelta(minutes=10)
CLAIM_ATTEMPTS = 5
# What a strategy writes on a pair, and what its open slots copy.
SLOT_RANK_FIELDS = ("priority", "probability", "pool")
RANK_FIELDS = (*SLOT_RANK_FIELDS, "strategy")


class LabelRejected(ValueError):
    """A label that cannot be stored; `field` names the input at fault (side, confidence,
    seconds), so an API can answer with a field error."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def annotator_for_user(*, project: Project, user: Any) -> Annotator:
    """The annotator row of an app user in a project, created on first use. An external
    annotator that came with an import keeps its name; the user then labels as 'user:NAME'."""
    annotator = Annotator.objects.filter(project=project, user=user).first()
    if annotator is not None:
        return annotator
    name = user.username
    if Annotator.objects.filter(project=project, name=name).exists():
        name = f"user:{name}"
    return Annotator.objects.create(project=project, name=name, user=user)


def _task_pairs(response_ids: list[int], limit: int, rng: random.Random) -> list[tuple[int, int]]:
    """All pairs of a task when there are at most `limit`, else a random spanning chain (every
    response appears) topped up with random pairs, so large groups stay bounded."""
    everything = list(itertools.combinations(sorted(response_ids), 2))
    if len(everything) <= limit:
        return everything
    order = response_ids[:]
    rng.shuffle(order)
    chosen = {tuple(sorted(p)) for p in itertools.pairwise(order)}
    rest = [p for p in everything if p not in chosen]
    rng.shuffle(rest)
    chosen.update(rest[: max(0, limit - len(chosen))])
    return sorted(chosen)  # type: ignore[arg-type]


def _group_pairs(
    response_ids: list[int], groups: Mapping[int, int], limit: int, rng: random.Random
) -> list[tuple[int, int]]:
    """_task_pairs of each group of a task's responses (those `groups` does not name are one
    group), or of the whole task when the strategy names no groups."""
    if not groups:
        return _task_pairs(response_ids, limit, rng)
    members: dict[int | None, list[int]] = {}
    for response in response_ids:
        members.setdefault(groups.get(response), []).append(response)
    return sorted(pair for part in members.values() for pair in _task_pairs(part, limit, rng))


@transaction.atomic
def queue_build(
    *,
    project: Project,
    strategy: QueueStrategy,
    dimensions: list[Dimension | None],
    pairs_per_task: int = 10,
    seed: int = 0,
) -> int:
    """Queue the pairs of every task with two or more responses, once per dimension (None: the
    overall preference), and give each pair `project.overlap` slots. Rebuilding refreshes
    priorities and adds new pairs; labels and claims already made are kept. Returns the number
    of pairs queued.

    A synthesis draw's responses (its low and high rollouts) are left out: paired with other
    responses of their task they would compare rollouts of other cells and dimensions. Their
    own pairs reach the queue pinned, by the synthesis validation (queue_pairs_pin).

    A strategy that pairs within groups (PairsWithinGroups) gets each group's pairs, up to
    `pairs_per_task` per group, and no pairs across groups: a rebuild with it drops those
    (unless served), one with another strategy queues them again."""
    in_draw = Exists(
        SynthesisDraw.objects.filter(
            Q(low_response=OuterRef("pk")) | Q(high_response=OuterRef("pk"))
        )
    )
    responses: dict[int, list[int]] = {}
    for task_id, response_id in (
        Response.objects.filter(project=project)
        .exclude(in_draw)
        .values_list("task_id", "pk")
        .order_by("pk")
    ):
        responses.setdefault(task_id, []).append(response_id)
    tasks = {
        pk: (split, domain)
        for pk, split, domain in Task.objects.filter(pk__in=responses).values_list(
            "pk", "split", "domain"
        )
    }
    groups = strategy.response_groups() if isinstance(strategy, PairsWithinGroups) else {}
    candidates = [
        CandidatePair(task_id, *tasks[task_id], a, b)
        for task_id in sorted(responses)
        if len(responses[task_id]) > 1
        # One generator per task: a change in one task leaves every other task's pairs alone.
        for a, b in _group_pairs(
            responses[task_id], groups, pairs_per_task, random.Random(f"{seed}:{task_id}")
        )
    ]
    ranks = strategy.rank(candidates)
    total = 0
    for block, dimension in enumerate(dimensions):
        rows = [
            QueuePair(
                project=project,
                task_id=c.task_id,
                response_a_id=c.response_a,
                response_b_id=c.response_b,
                dimension=dimension,
                block=block,
                priority=rank.priority,
                probability=rank.probability,
                pool=rank.pool,
                strategy=strategy.name,
            )
            for c, rank in zip(candidates, ranks, strict=True)
        ]
        for chunk in itertools.batched(rows, 2000):
            _pairs_upsert(project, list(chunk), dimension)
        _pairs_prune(project, dimension, {(r.response_a_id, r.response_b_id) for r in rows})
        total += len(rows)
    _pinned_blocks_align(project, dimensions)
    _slots_fill(project)
    _written_record(project, strategy)
    return total


def _pinned_blocks_align(project: Project, dimensions: list[Dimension | None]) -> None:
    """Put pinned pairs in the block of their dimension, or in blocks after the built ones, so
    that a block keeps holding one dimension (its introduction shows once per block)."""
    blocks = {None if d is None else d.pk: i for i, d in enumerate(dimensions)}
    pinned = QueuePair.objects.filter(project=project, overlap__isnull=False)
    extra = sorted(
        {d for d in pinned.values_list("dimension_id", flat=True) if d not in blocks},
        key=lambda d: (d is not None, d or 0),
    )
    blocks.update({d: len(dimensions) + i for i, d in enumerate(extra)})
    for dimension_id, block in blocks.items():
        pinned.filter(dimension_id=dimension_id).exclude(block=block).update(block=block)


@dataclass(frozen=True)
class PinnedPair:
    """A pair another part wants labeled as it is (say a synthesis draw's two responses)."""

    task_id: int
    response_a: int
    response_b: int
    dimension_id: int | None


# Above every CoverageFirst priority (at most 2): pinned pairs come first within their block.
PINNED_PRIORITY = 2.0


@transaction.atomic
def queue_pairs_pin(
    *, project: Project, pairs: list[PinnedPair], overlap: int, strategy: str, seed: int = 0
) -> int:
    """Queue exactly these pairs with `overlap` slots each, whatever queue_build selects: it
    never prunes or reprioritizes them. A pair already queued keeps its labels and claims and
    gets the larger overlap. Each dimension's pairs join the block that dimension already has
    (else a new block at the end), first within it, in a seeded random order. Pinning the
    same pairs again changes nothing. Returns the number of pairs pinned."""
    if overlap < 1:
        raise ValueError("overlap must be at least 1")
    queued = QueuePair.objects.filter(project=project)
    ordered = [(*sorted((p.response_a, p.response_b)), p.dimension_id, p.task_id) for p in pairs]
    existing = {
        (row.response_a_id, row.response_b_id, row.dimension_id): row
        for chunk in itertools.batched(sorted({a for a, _, _, _ in ordered}), 5000)
        for row in queued.filter(response_a_id__in=chunk)
    }
    blocks: dict[int | None, int] = {}
    last = queued.aggregate(last=Max("block"))["last"]
    next_block = 0 if last is None else last + 1
    new, changed = [], []
    for a, b, dimension_id, task_id in ordered:
        if dimension_id not in blocks:
            # Pinned pairs of the dimension first: queue_build aligns them with its own block
            # for the dimension, and a stale served pair may linger in an old block number.
            block = (
                queued.filter(dimension_id=dimension_id)
                .order_by(F("overlap").asc(nulls_last=True), "block")
                .values_list("block", flat=True)
                .first()
            )
            if block is None:
                block, next_block = next_block, next_block + 1
            blocks[dimension_id] = block
        priority = PINNED_PRIORITY + random.Random(f"{seed}:{a}:{b}:{dimension_id}").random()
        row = existing.get((a, b, dimension_id))
        if row is None:
            new.append(
                QueuePair(
                    project=project,
                    task_id=task_id,
                    response_a_id=a,
                    response_b_id=b,
                    dimension_id=dimension_id,
                    block=blocks[dimension_id],
                    priority=priority,
                    strategy=strategy,
                    overlap=overlap,
                )
            )
        elif row.overlap is None or row.overlap < overlap or row.strategy != strategy:
            row.overlap = max(overlap, row.overlap or 0, project.overlap)
            # Pinned, not drawn: whatever chance a strategy gave the pair no longer applies.
            row.strategy, row.priority, row.probability, row.pool = strategy, priority, None, None
            changed.append(row)
    QueuePair.objects.bulk_create(new, batch_size=2000)
    QueuePair.objects.bulk_update(changed, ["overlap", *RANK_FIELDS], batch_size=2000)
    _slots_fill(project)
    return len(pairs)


def _pairs_upsert(project: Project, rows: list[QueuePair], dimension: Dimension | None) -> None:
    existing = {
        (a, b): (pk, overlap)
        for pk, a, b, overlap in QueuePair.objects.filter(
            project=project,
            dimension=dimension,
            response_a_id__in=[r.response_a_id for r in rows],
        ).values_list("pk", "response_a_id", "response_b_id", "overlap")
    }
    new, changed = [], []
    for row in rows:
        pk, overlap = existing.get((row.response_a_id, row.response_b_id), (None, None))
        if pk is None:
            new.append(row)
        elif overlap is None:  # a pinned pair (its own overlap) keeps its priority
            row.pk = pk
            changed.append(row)
    QueuePair.objects.bulk_create(new)
    QueuePair.objects.bulk_update(changed, ["block", *RANK_FIELDS])


def _pairs_prune(
    project: Project, dimension: Dimension | None, wanted: set[tuple[int, int]]
) -> None:
    """Drop pairs the new selection no longer wants, unless someone was already served them
    (their labels and assignments stay meaningful)."""
    stale = [
        pk
        for pk, a, b in QueuePair.objects.filter(
            project=project, dimension=dimension, overlap__isnull=True
        ).values_list("pk", "response_a_id", "response_b_id")
        if (a, b) not in wanted
    ]
    for chunk in itertools.batched(stale, 5000):
        QueuePair.objects.filter(pk__in=chunk, assignments__isnull=True).delete()


def _slots_fill(project: Project) -> None:
    """Give every pair its overlap in slots (its own, else the project's) and copy the pair's
    ordering and selection fields onto open slots."""
    slots: dict[int, int] = {}
    for pair_id in QueueSlot.objects.filter(project=project).values_list("pair_id", flat=True):
        slots[pair_id] = slots.get(pair_id, 0) + 1
    new = []
    for pair_id, overlap in QueuePair.objects.filter(project=project).values_list("pk", "overlap"):
        for _ in range((overlap or project.overlap) - slots.get(pair_id, 0)):
            new.append(QueueSlot(pair_id=pair_id, project=project))
    for chunk in itertools.batched(new, 5000):
        QueueSlot.objects.bulk_create(chunk)
    _slots_sync(project)


def _slots_sync(project: Project) -> None:
    """Copy each pair's block and rank onto its open slots, where the claim reads them."""
    pair = QueuePair.objects.filter(pk=OuterRef("pair_id"))
    QueueSlot.objects.filter(project=project, done_at__isnull=True).update(
        block=Subquery(pair.values("block")[:1]),
        **{name: Subquery(pair.values(name)[:1]) for name in SLOT_RANK_FIELDS},
    )


def _written_record(project: Project, strategy: QueueStrategy) -> None:
    """Note when priorities were written and by which strategy (the Queue page says so); the
    label counter starts over, since these priorities already saw every label so far."""
    Project.objects.filter(pk=project.pk).update(
        queue_written_at=timezone.now(),
        queue_written_strategy=strategy.name,
        queue_labels_since_refresh=0,
    )


def _free(now: object) -> Q:
    return Q(claimed_by__isnull=True) | Q(lease_until__lt=now)


def _held_reclaim(*, project: Project, annotator: Annotator, now: Any) -> QueueAssignment | None:
    """The annotator's oldest unfinished assignment whose slot nobody else took meanwhile,
    with its lease renewed: a pair left open when they walked away comes back to them."""
    unfinished = (
        QueueAssignment.objects.filter(
            annotator=annotator,
            submitted_at__isnull=True,
            skipped_at__isnull=True,
            pair__project=project,
        )
        .filter(Q(slot__claimed_by=annotator) | Q(slot__claimed_by__isnull=True))
        .filter(slot__done_at__isnull=True)
        .select_related("pair")
        .order_by("served_at")
    )
    for assignment in unfinished[:3]:
        renewed = (
            QueueSlot.objects.filter(pk=assignment.slot_id, done_at__isnull=True)
            .filter(Q(claimed_by=annotator) | Q(claimed_by__isnull=True))
            .update(claimed_by=annotator, lease_until=now + LEASE)
        )
        if renewed == 1:
            return assignment
    return None


def assignment_own(
    *, project: Project, annotator: Annotator, assignment_id: int
) -> QueueAssignment | None:
    """One of this annotator's assignments in the project, ready for label_submit; None for
    anyone else's (a caller answers 404: whether the id exists is not theirs to learn)."""
    return (
        QueueAssignment.objects.select_related("pair__project", "annotator")
        .filter(pk=assignment_id, annotator=annotator, pair__project=project)
        .first()
    )


def pair_claim_next(*, project: Project, annotator: Annotator) -> QueueAssignment | None:
    """The annotator's current unfinished assignment if its lease still runs, else a new claim
    on the best free slot of a pair this annotator has never been served; None when the queue
    has nothing left for them."""
    now = timezone.now()
    held = _held_reclaim(project=project, annotator=annotator, now=now)
    if held is not None:
        return held
    served = QueueAssignment.objects.filter(pair=OuterRef("pair"), annotator=annotator)
    for _ in range(CLAIM_ATTEMPTS):
        try:
            with transaction.atomic():
                slot = (
                    QueueSlot.objects.select_for_update(skip_locked=True, of=("self",))
                    .filter(_free(now), project=project, done_at__isnull=True)
                    .exclude(Exists(served))
                    .order_by("block", "-priority", "pk")
                    .first()
                )
                if slot is None:
                    return None
                taken = QueueSlot.objects.filter(
                    _free(now), pk=slot.pk, done_at__isnull=True
                ).update(claimed_by=annotator, lease_until=now + LEASE)
                if taken != 1:
                    continue  # someone else took it between our read and our update
                # The slot carries the pair's selection chance: no read of the pair.
                return QueueAssignment.objects.create(
                    pair_id=slot.pair_id,
                    annotator=annotator,
                    slot=slot,
                    slot_order=random.choice(("ab", "ba")),
                    probability=slot.probability,
                    pool=slot.pool,
                )
        except IntegrityError:
            continue  # served to this annotator concurrently (another tab): try the next one
    return None


def assignment_skip(*, assignment: QueueAssignment) -> bool:
    """Pass an unlabeled pair on: its slot goes back to the queue for others, and the
    assignment stays (marked skipped) so pair_claim_next never serves the pair to this
    annotator again. Returns False, changing nothing, for a pair they already labeled: a label
    is revised, not skipped."""
    with transaction.atomic():
        skipped = QueueAssignment.objects.filter(
            pk=assignment.pk, submitted_at__isnull=True
        ).update(skipped_at=timezone.now())
        if skipped:
            QueueSlot.objects.filter(
                pk=assignment.slot_id, claimed_by=assignment.annotator, done_at__isnull=True
            ).update(claimed_by=None, lease_until=None)
    return bool(skipped)


@dataclass(frozen=True)
class LabelInput:
    side: str  # "left", "right" or "tie", as the annotator saw the pair
    confidence: int | None
    seconds: float | None


def label_submit(*, assignment: QueueAssignment, label: LabelInput) -> Preference:
    """Record the annotator's label for an assignment; submitting again (a retry, a revision
    after Backspace, or after the lease expired) replaces their current label, never adds a
    second one."""
    pair = assignment.pair
    if label.side not in {"left", "right", "tie"}:
        raise LabelRejected("side must be left, right or tie", field="side")
    if label.side == "tie" and not pair.project.allow_ties:
        raise LabelRejected("this project does not allow ties", field="side")
    if label.confidence not in {None, 0, 1, 2}:
        raise LabelRejected("confidence must be 0, 1 or 2", field="confidence")
    if label.seconds is not None and not 0 <= label.seconds < 86_400:
        raise LabelRejected("seconds spent must be between 0 and 86400", field="seconds")
    left_is_a = assignment.slot_order == "ab"
    choice = {"tie": "tie", "left": "a" if left_is_a else "b", "right": "b" if left_is_a else "a"}
    now = timezone.now()
    with transaction.atomic():
        # Lock the assignment so that a retry racing the original submission serializes; its
        # submitted_at, read under the lock, tells a first label from a revision.
        [submitted_at] = (
            QueueAssignment.objects.select_for_update()
            .filter(pk=assignment.pk)
            .values_list("submitted_at", flat=True)
        )
        new = Preference(
            task_id=pair.task_id,
            response_a_id=pair.response_a_id,
            response_b_id=pair.response_b_id,
            choice=choice[label.side],
            confidence=label.confidence,
            dimension_id=pair.dimension_id,
            provider=Provider.HUMAN,
            annotator=assignment.annotator,
            slot_order=assignment.slot_order,
            seconds_spent=None if label.seconds is None else round(label.seconds, 2),
            selection_probability=assignment.probability,
            selection_pool=assignment.pool,
        )
        a, b = pair.response_a_id, pair.response_b_id
        current = Preference.objects.filter(
            Q(response_a_id=a, response_b_id=b) | Q(response_a_id=b, response_b_id=a),
            dimension_id=pair.dimension_id,
            annotator=assignment.annotator,
            is_current=True,
        ).first()
        if current is None or not preference_same(current, new):
            if current is not None:
                Preference.objects.filter(pk=current.pk).update(is_current=False)
            new.save()
        else:
            new = current
        QueueAssignment.objects.filter(pk=assignment.pk).update(submitted_at=now)
        QueueSlot.objects.filter(
            pk=assignment.slot_id, claimed_by=assignment.annotator, done_at__isnull=True
        ).update(done_at=now)
    if submitted_at is None:
        # After the label's commit: every annotator's label updates this one project row, so
        # its lock is held for one statement, not for a whole label transaction.
        _labels_count(pair.project)
        label_submitted.send(sender=Preference, project=pair.project)
    return new


def _labels_count(project: Project) -> None:
    """Count a new label towards the next rewrite of priorities, and ask for one every
    `queue_refresh_labels` labels. The reset is conditional, so of concurrent labels that reach
    the threshold exactly one asks."""
    if project.queue_refresh_labels == 0:
        return
    Project.objects.filter(pk=project.pk).update(
        queue_labels_since_refresh=F("queue_labels_since_refresh") + 1
    )
    reached = Project.objects.filter(
        pk=project.pk, queue_labels_since_refresh__gte=F("queue_refresh_labels")
    ).update(queue_labels_since_refresh=0)
    if reached:
        queue_refresh_soon(project)


# A refresh asked for this long ago and not yet started is taken as lost (a broker restart):
# asking again enqueues a new one.
QUEUE_REFRESH_STALE = timedelta(minutes=15)


def queue_refresh_soon(project: Project) -> bool:
    """Rewrite the project's priorities in the background, once this transaction commits;
    nothing new when a refresh is already pending for the project. Returns whether this call
    enqueued one."""
    from labeling.tasks import queue_refresh_task

    now = timezone.now()
    asked = (
        Project.objects.filter(pk=project.pk)
        .filter(
            Q(queue_refresh_requested_at__isnull=True)
            | Q(queue_refresh_requested_at__lt=now - QUEUE_REFRESH_STALE)
        )
        .update(queue_refresh_requested_at=now)
    )
    if asked:
        queue_refresh_task.delay_on_commit(project.pk)
    return bool(asked)


def refresh_seed(project: Project) -> int:
    """The seed of a refresh's draw: the number of labels the project holds (queue_refresh says
    why)."""
    return Preference.objects.filter(task__project=project).count()


def queue_refresh(
    *, project: Project, seed: int | None = None, strategy: QueueStrategy | None = None
) -> int:
    """Rewrite priority, probability and pool of the project's queued pairs that are not pinned,
    with the strategy the project chose as it can run now (strategy_for): the same pairs, new
    ranks, written in one transaction. Each pair is ranked once and its rank applies to every
    dimension it is queued in. Returns the number of queue rows rewritten. A caller that has
    just built the project's strategy passes it as `strategy`, so it is not built twice.

    Without a `seed`, the draw is seeded by the number of labels the project holds: a redelivered
    refresh writes the same ranks again, while each refresh after new labels draws afresh. One
    fixed seed would give a pair the same random key in every refresh, so a pair unlucky once
    would stay unlucky, and the chance recorded for it would overstate how often it is drawn."""
    # Cleared before ranking, so labels arriving while the strategy computes can ask again.
    Project.objects.filter(pk=project.pk).update(queue_refresh_requested_at=None)
    if strategy is None:
        chosen = strategy_for(project, seed=refresh_seed(project) if seed is None else seed)
        strategy = chosen.strategy
    queued = list(
        QueuePair.objects.filter(project=project, overlap__isnull=True)
        .order_by("task_id", "response_a_id", "response_b_id", "pk")
        .values_list("pk", "task_id", "response_a_id", "response_b_id")
    )
    keys = list(dict.fromkeys((t, a, b) for _, t, a, b in queued))
    tasks = {
        pk: (split, domain)
        for pk, split, domain in Task.objects.filter(pk__in={t for t, _, _ in keys}).values_list(
            "pk", "split", "domain"
        )
    }
    # Ranked before the transaction: the writes lock open slots, which claims skip (SKIP
    # LOCKED), so the locks last only as long as the UPDATEs. A pair a concurrent build
    # removed meanwhile updates nothing; one it added keeps the build's rank.
    candidates = [CandidatePair(t, *tasks[t], a, b) for t, a, b in keys]
    ranks = dict(zip(keys, strategy.rank(candidates), strict=True))
    rows = [
        QueuePair(
            pk=pk,
            priority=ranks[(t, a, b)].priority,
            probability=ranks[(t, a, b)].probability,
            pool=ranks[(t, a, b)].pool,
            strategy=strategy.name,
        )
        for pk, t, a, b in queued
    ]
    with transaction.atomic():
        QueuePair.objects.bulk_update(rows, list(RANK_FIELDS), batch_size=2000)
        _slots_sync(project)
        _written_record(project, strategy)
    return len(rows)


def queue_blocks(*, project: Project) -> list[dict[str, Any]]:
    """Per dimension block: pairs queued, labels done and wanted."""
    rows = []
    for block, dimension in (
        QueuePair.objects.filter(project=project)
        .values_list("block", "dimension__name")
        .distinct()
        .order_by("block")
    ):
        slots = QueueSlot.objects.filter(project=project, block=block)
        rows.append(
            {
                "block": block,
                "dimension": dimension,
                "pairs": QueuePair.objects.filter(project=project, block=block).count(),
                "done": slots.filter(done_at__isnull=False).count(),
                "target": slots.count(),
            }
        )
    return rows


def queue_progress(*, project: Project, annotator: Annotator | None = None) -> dict[str, int]:
    slots = QueueSlot.objects.filter(project=project)
    progress = {"done": slots.filter(done_at__isnull=False).count(), "target": slots.count()}
    if annotator is not None:
        progress["mine"] = QueueAssignment.objects.filter(
            annotator=annotator, submitted_at__isnull=False
        ).count()
    return progress


def queue_settings_set(
    *, project: Project, strategy: str, epsilon: float, refresh_labels: int
) -> bool:
    """Choose the project's queue strategy, its random share and its refresh count. Returns
    whether the strategy or the share changed, that is whether the queued priorities are now
    stale (the caller rewrites them: a build does, the Queue page asks for a refresh)."""
    names = [spec.name for spec in strategy_specs()]
    if strategy not in names:
        raise ValueError(f"unknown queue strategy {strategy!r}; choose one of {', '.join(names)}")
    if not 0 <= epsilon <= 1:
        raise ValueError("the random share must be between 0 and 1")
    if refresh_labels < 0:
        raise ValueError("the refresh count cannot be negative")
    ranking_changed = (strategy, epsilon) != (project.queue_strategy, project.queue_epsilon)
    project.queue_strategy, project.queue_epsilon = strategy, epsilon
    project.queue_refresh_labels = refresh_labels
    project.save(update_fields=["queue_strategy", "queue_epsilon", "queue_refresh_labels"])
    return ranking_changed
