"""The queue's plumbing for sampling strategies: the registry, selection chances carried from a
strategy's rank to the label, and priorities rewritten in the background."""

from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from labeling.imports import jsonl_import
from labeling.models import Annotator, Preference, Project, QueueAssignment, QueuePair, QueueSlot
from labeling.queue import (
    QUEUE_REFRESH_STALE,
    LabelInput,
    PinnedPair,
    label_submit,
    pair_claim_next,
    queue_build,
    queue_pairs_pin,
    queue_refresh,
    queue_refresh_soon,
)
from labeling.strategies import (
    CandidatePair,
    CoverageFirst,
    Ranked,
    StrategyChoice,
    StrategySpec,
    strategy_for,
    strategy_register,
    strategy_specs,
)
from labeling.tasks import queue_refresh_task
from tests.conftest import wait_for
from tests.labeling.helpers import write_jsonl
from tests.labeling.test_queue import tasks_with_responses


class ByResponse:
    """A sampling strategy with known output: priority from the pair's first response id, a
    chance of 1/(2 * pool) over a pool of every pair it ranks, and a generation number so a
    test can see which writing a pair holds."""

    name = "by_response"

    def __init__(self, generation: int = 1) -> None:
        self.generation = generation

    def rank(self, pairs: Sequence[CandidatePair]) -> list[Ranked]:
        return [
            Ranked(self.generation * 1000 + p.response_a, 1 / (2 * len(pairs)), len(pairs))
            for p in pairs
        ]


@pytest.fixture
def by_response() -> Iterator[StrategySpec]:
    """ByResponse registered as a project's choice; each build is a new generation from 2 on
    (queue_build in `sampled` writes generation 1), so a refresh visibly writes new ranks."""
    generations = iter(range(2, 100))
    spec = StrategySpec(
        "by_response",
        "By response",
        "For tests.",
        lambda project, seed: StrategyChoice(ByResponse(next(generations))),
    )
    strategy_register(spec)
    yield spec
    from labeling import strategies

    del strategies._SPECS[spec.name]


@pytest.fixture
def sampled(project: Project, tmp_path: Path, by_response: StrategySpec) -> Project:
    """Two tasks of three responses (three pairs each), queued by ByResponse."""
    records = tasks_with_responses(2, 3, split="selection")
    jsonl_import(project=project, path=write_jsonl(tmp_path / "q.jsonl", records))
    project.queue_strategy = "by_response"
    project.save()
    queue_build(project=project, strategy=ByResponse(), dimensions=[None])
    return project


def test_coverage_is_registered_first_and_registering_a_name_again_replaces_it(
    by_response: StrategySpec,
) -> None:
    names = [spec.name for spec in strategy_specs()]
    assert names[0] == "coverage" and names.count("by_response") == 1
    strategy_register(StrategySpec("by_response", "Renamed", "Again.", by_response.build))
    specs = strategy_specs()
    assert [spec.name for spec in specs] == names
    assert specs[names.index("by_response")].label == "Renamed"


def test_an_unknown_strategy_serves_coverage_and_says_which_name_is_missing(
    project: Project,
) -> None:
    project.queue_strategy = "gone"
    choice = strategy_for(project, seed=3)
    assert isinstance(choice.strategy, CoverageFirst) and choice.strategy.seed == 3
    assert "'gone' is not available" in choice.fallback and "coverage" in choice.fallback
    project.queue_strategy = "coverage"
    assert strategy_for(project).fallback == ""


def test_the_chance_travels_from_the_rank_to_the_slot_the_assignment_and_the_label(
    sampled: Project,
) -> None:
    # 6 pairs in the pool, each with chance 1 / (2 * 6) = 1/12.
    assert set(QueuePair.objects.values_list("probability", "pool")) == {(1 / 12, 6)}
    assert set(QueueSlot.objects.values_list("probability", "pool")) == {(1 / 12, 6)}
    alice = Annotator.objects.create(project=sampled, name="alice")
    assignment = pair_claim_next(project=sampled, annotator=alice)
    assert assignment is not None
    # The highest priority first: the pair whose first response has the highest id.
    assert assignment.pair.response_a_id == max(
        QueuePair.objects.values_list("response_a_id", flat=True)
    )
    assert (assignment.probability, assignment.pool) == (1 / 12, 6)
    label = label_submit(assignment=assignment, label=LabelInput("left", None, None))
    assert (label.selection_probability, label.selection_pool) == (1 / 12, 6)
    revised = label_submit(assignment=assignment, label=LabelInput("right", None, None))
    assert revised.pk != label.pk
    assert (revised.selection_probability, revised.selection_pool) == (1 / 12, 6)


def test_a_pinned_pair_and_a_coverage_label_carry_no_chance(sampled: Project) -> None:
    pair = QueuePair.objects.order_by("pk").first()
    assert pair is not None
    queue_pairs_pin(
        project=sampled,
        pairs=[PinnedPair(pair.task_id, pair.response_a_id, pair.response_b_id, None)],
        overlap=1,
        strategy="validation",
    )
    pair.refresh_from_db()
    assert (pair.probability, pair.pool) == (None, None)
    queue_build(project=sampled, strategy=CoverageFirst(), dimensions=[None])
    alice = Annotator.objects.create(project=sampled, name="alice")
    while (assignment := pair_claim_next(project=sampled, annotator=alice)) is not None:
        label_submit(assignment=assignment, label=LabelInput("left", None, None))
    assert set(Preference.objects.values_list("selection_probability", "selection_pool")) == {
        (None, None)
    }


def test_a_claim_takes_as_many_queries_as_before_the_chance_was_recorded(
    sampled: Project, django_assert_num_queries: Any
) -> None:
    alice = Annotator.objects.create(project=sampled, name="alice")
    # The held-pair lookup; then, in a savepoint, the locked read of the best free slot, its
    # conditional UPDATE and the assignment's INSERT (the slot already holds the chance).
    with django_assert_num_queries(6):
        assignment = pair_claim_next(project=sampled, annotator=alice)
    assert assignment is not None and assignment.probability == 1 / 12


def test_refresh_rewrites_ranks_of_unpinned_pairs_and_open_slots_only(sampled: Project) -> None:
    alice = Annotator.objects.create(project=sampled, name="alice")
    first = pair_claim_next(project=sampled, annotator=alice)
    assert first is not None
    label_submit(assignment=first, label=LabelInput("left", None, None))
    pinned = QueuePair.objects.exclude(pk=first.pair_id).order_by("pk").first()
    assert pinned is not None
    queue_pairs_pin(
        project=sampled,
        pairs=[PinnedPair(pinned.task_id, pinned.response_a_id, pinned.response_b_id, None)],
        overlap=1,
        strategy="validation",
    )
    pinned_before = QueueSlot.objects.get(pair=pinned).priority
    done_before = QueueSlot.objects.get(pair_id=first.pair_id).priority

    assert queue_refresh(project=sampled) == 5
    assert QueuePair.objects.count() == 6
    for pair in QueuePair.objects.exclude(pk=pinned.pk):
        # 5 unpinned pairs in the new pool: chance 1 / (2 * 5) = 1/10.
        assert (pair.priority, pair.probability, pair.pool) == (
            2000 + pair.response_a_id,
            1 / 10,
            5,
        )
        assert pair.strategy == "by_response"
    open_slots = QueueSlot.objects.filter(done_at__isnull=True).exclude(pair=pinned)
    assert {(s.priority, s.probability) for s in open_slots} == {
        (2000 + s.pair.response_a_id, 1 / 10) for s in open_slots
    }
    assert QueueSlot.objects.get(pair=pinned).priority == pinned_before
    assert QueueSlot.objects.get(pair_id=first.pair_id).priority == done_before
    sampled.refresh_from_db()
    assert sampled.queue_written_strategy == "by_response" and sampled.queue_written_at


def test_the_refresh_task_twice_writes_the_same_ranks(project: Project, tmp_path: Path) -> None:
    records = tasks_with_responses(2, 3)
    jsonl_import(project=project, path=write_jsonl(tmp_path / "q.jsonl", records))
    queue_build(project=project, strategy=CoverageFirst(seed=5), dimensions=[None])
    project.queue_refresh_requested_at = timezone.now()
    project.save()
    assert queue_refresh_task(project.pk) == {"project": project.pk, "rewritten": 6}
    ranks = list(QueuePair.objects.order_by("pk").values_list("priority", flat=True))
    assert queue_refresh_task(project.pk) == {"project": project.pk, "rewritten": 6}
    assert list(QueuePair.objects.order_by("pk").values_list("priority", flat=True)) == ranks
    project.refresh_from_db()
    assert project.queue_refresh_requested_at is None
    assert queue_refresh_task(10**6) == {"project": 10**6, "rewritten": 0, "missing": True}


def test_each_refresh_after_new_labels_draws_afresh(project: Project, tmp_path: Path) -> None:
    records = tasks_with_responses(2, 3)
    jsonl_import(project=project, path=write_jsonl(tmp_path / "q.jsonl", records))
    queue_build(project=project, strategy=CoverageFirst(seed=5), dimensions=[None])

    def ranks() -> list[float]:
        return list(QueuePair.objects.order_by("pk").values_list("priority", flat=True))

    queue_refresh(project=project)
    before = ranks()
    queue_refresh(project=project)
    assert ranks() == before  # the same labels: the same draw
    # A label on a pair the queue does not hold leaves the pool as it was; the draw still moves,
    # since a fixed seed would hand every pair the same random key refresh after refresh.
    pair = QueuePair.objects.order_by("pk").first()
    assert pair is not None
    Preference.objects.create(
        task_id=pair.task_id,
        response_a_id=pair.response_a_id,
        response_b_id=pair.response_b_id,
        choice="a",
        provider="synthetic",
        annotator=Annotator.objects.create(project=project, name="generator"),
    )
    queue_refresh(project=project)
    assert ranks() != before


def label_all(project: Project, annotator: Annotator, count: int) -> list[QueueAssignment]:
    done = []
    for _ in range(count):
        assignment = pair_claim_next(project=project, annotator=annotator)
        assert assignment is not None
        label_submit(assignment=assignment, label=LabelInput("left", None, None))
        done.append(assignment)
    return done


def test_every_n_new_labels_ask_for_one_refresh_and_revisions_do_not_count(
    sampled: Project, django_capture_on_commit_callbacks: Any
) -> None:
    sampled.queue_refresh_labels = 2
    sampled.save()
    alice = Annotator.objects.create(project=sampled, name="alice")
    with django_capture_on_commit_callbacks() as sent:
        [first] = label_all(sampled, alice, 1)
        label_submit(assignment=first, label=LabelInput("right", None, None))  # a revision
    assert sent == []
    sampled.refresh_from_db()
    assert sampled.queue_labels_since_refresh == 1
    with django_capture_on_commit_callbacks() as sent:
        label_all(sampled, alice, 1)
    assert len(sent) == 1
    sampled.refresh_from_db()
    assert sampled.queue_labels_since_refresh == 0 and sampled.queue_refresh_requested_at
    # Two more labels reach the count again, but the first refresh has not run: no second.
    with django_capture_on_commit_callbacks() as sent:
        label_all(sampled, alice, 2)
    assert sent == []


def test_a_count_of_zero_never_asks(
    sampled: Project, django_capture_on_commit_callbacks: Any
) -> None:
    sampled.queue_refresh_labels = 0
    sampled.save()
    alice = Annotator.objects.create(project=sampled, name="alice")
    with django_capture_on_commit_callbacks() as sent:
        label_all(sampled, alice, 6)
    assert sent == []


def test_a_pending_refresh_is_asked_for_again_only_once_it_is_stale(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks() as sent:
        assert queue_refresh_soon(project) is True
        assert queue_refresh_soon(project) is False
    assert len(sent) == 1
    Project.objects.filter(pk=project.pk).update(
        queue_refresh_requested_at=timezone.now() - QUEUE_REFRESH_STALE - timedelta(seconds=1)
    )
    with django_capture_on_commit_callbacks() as sent:
        assert queue_refresh_soon(project) is True
    assert len(sent) == 1


@pytest.mark.worker
def test_a_real_worker_rewrites_the_priorities_asked_for(
    celery_worker_process: str, tmp_path: Path
) -> None:
    project = Project.objects.create(slug="live", name="Live")
    records = tasks_with_responses(2, 3)
    jsonl_import(project=project, path=write_jsonl(tmp_path / "q.jsonl", records))
    queue_build(project=project, strategy=CoverageFirst(seed=5), dimensions=[None])
    built = dict(QueuePair.objects.values_list("pk", "priority"))
    project.refresh_from_db()
    assert queue_refresh_soon(project)  # autocommit: enqueued now
    assert wait_for(
        lambda: (
            not Project.objects.filter(
                pk=project.pk, queue_refresh_requested_at__isnull=False
            ).exists()
        ),
        timeout=90,
    )
    assert wait_for(
        lambda: dict(QueuePair.objects.values_list("pk", "priority")) != built, timeout=30
    )
    # The worker ranked with the project's strategy at its default seed, 0, not the build's 5.
    expected = QueuePair.objects.order_by("task_id", "response_a_id", "response_b_id")
    pairs = [
        CandidatePair(p.task_id, "train", "", p.response_a_id, p.response_b_id) for p in expected
    ]
    assert [p.priority for p in expected] == [r.priority for r in CoverageFirst(0).rank(pairs)]
