import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from labeling.imports import jsonl_import
from labeling.models import (
    Annotator,
    Dimension,
    Preference,
    Project,
    QueueAssignment,
    QueuePair,
    QueueSlot,
    Response,
    SynthesisDraw,
)
from labeling.queue import (
    PINNED_PRIORITY,
    LabelInput,
    LabelRejected,
    PinnedPair,
    label_submit,
    pair_claim_next,
    queue_build,
    queue_pairs_pin,
)
from labeling.strategies import CandidatePair, CoverageFirst
from tests.labeling.helpers import synthesis_records, write_jsonl


def tasks_with_responses(n_tasks: int, per_task: int, split: str = "train") -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for t in range(n_tasks):
        records.append({"type": "task", "id": f"t{t}", "prompt": f"p{t}", "split": split})
        records += [
            {"type": "response", "id": f"t{t}/r{r}", "task": f"t{t}", "content": f"t{t} answer {r}"}
            for r in range(per_task)
        ]
    return records


@pytest.fixture
def queued(project: Project, tmp_path: Path) -> Project:
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "q.jsonl", tasks_with_responses(4, 3))
    )
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None])
    return project


def annotators(project: Project, *names: str) -> list[Annotator]:
    return [Annotator.objects.create(project=project, name=name) for name in names]


def test_build_queues_every_pair_once_with_overlap_slots(queued: Project) -> None:
    assert QueuePair.objects.count() == 4 * 3  # 3 responses -> 3 pairs per task
    assert QueueSlot.objects.count() == 12
    queued.overlap = 2
    queued.save()
    queue_build(project=queued, strategy=CoverageFirst(), dimensions=[None])
    assert QueuePair.objects.count() == 12 and QueueSlot.objects.count() == 24


def test_large_groups_are_bounded_and_still_cover_every_response(
    project: Project, tmp_path: Path
) -> None:
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "q.jsonl", tasks_with_responses(1, 8))
    )
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None], pairs_per_task=10)
    pairs = list(QueuePair.objects.values_list("response_a_id", "response_b_id"))
    assert len(pairs) == 10  # of 28 possible
    assert len({r for pair in pairs for r in pair}) == 8


def test_coverage_first_serves_meta_and_selection_first() -> None:
    pairs = [
        CandidatePair(1, "train", "", 1, 2),
        CandidatePair(2, "meta", "", 3, 4),
        CandidatePair(3, "selection", "", 5, 6),
    ]
    train, meta, selection = CoverageFirst(seed=1).rank(pairs)
    assert min(meta.priority, selection.priority) > train.priority
    assert CoverageFirst(seed=1).rank(pairs) == [train, meta, selection]
    # Coverage does not draw at random: no selection chance for the estimators to reweight.
    assert {(r.probability, r.pool) for r in (train, meta, selection)} == {(None, None)}


def test_overlap_one_gives_distinct_pairs_and_none_twice(queued: Project) -> None:
    alice, bob = annotators(queued, "alice", "bob")
    seen: dict[str, list[int]] = {"alice": [], "bob": []}
    for _ in range(6):
        for who in (alice, bob):
            assignment = pair_claim_next(project=queued, annotator=who)
            assert assignment is not None
            seen[who.name].append(assignment.pair_id)
            label_submit(assignment=assignment, label=LabelInput("left", 1, 3.0))
    assert not set(seen["alice"]) & set(seen["bob"])
    assert len(set(seen["alice"])) == 6
    assert pair_claim_next(project=queued, annotator=alice) is None


def test_overlap_two_serves_each_pair_to_two_different_annotators(queued: Project) -> None:
    queued.overlap = 2
    queued.save()
    queue_build(project=queued, strategy=CoverageFirst(), dimensions=[None])
    people = annotators(queued, "a", "b", "c")
    while True:
        progress = False
        for who in people:
            assignment = pair_claim_next(project=queued, annotator=who)
            if assignment is not None:
                label_submit(assignment=assignment, label=LabelInput("right", 2, 1.0))
                progress = True
        if not progress:
            break
    per_pair = Preference.objects.values_list("response_a_id", "response_b_id", "annotator_id")
    assert len(per_pair) == 24 and len(set(per_pair)) == 24
    assert QueueSlot.objects.filter(done_at__isnull=True).count() == 0


def test_reload_returns_the_same_held_pair(queued: Project) -> None:
    (alice,) = annotators(queued, "alice")
    first = pair_claim_next(project=queued, annotator=alice)
    again = pair_claim_next(project=queued, annotator=alice)
    assert first is not None and again is not None and first.pk == again.pk


def test_expired_lease_frees_the_slot_and_a_late_label_is_kept_once(queued: Project) -> None:
    alice, bob = annotators(queued, "alice", "bob")
    held = pair_claim_next(project=queued, annotator=alice)
    assert held is not None
    QueueSlot.objects.update(lease_until=timezone.now() - timedelta(seconds=1))
    taken = pair_claim_next(project=queued, annotator=bob)
    assert taken is not None and taken.slot_id == held.slot_id  # the best slot is free again
    label_submit(assignment=held, label=LabelInput("left", 2, 4.0))
    label_submit(assignment=held, label=LabelInput("left", 2, 4.0))  # a retry of the same label
    assert Preference.objects.filter(annotator=alice).count() == 1
    assert QueueSlot.objects.get(pk=held.slot_id).done_at is None  # bob's label still counts
    label_submit(assignment=taken, label=LabelInput("right", 1, 2.0))
    assert QueueSlot.objects.get(pk=held.slot_id).done_at is not None


def test_revision_keeps_history_and_maps_sides_through_slot_order(queued: Project) -> None:
    (alice,) = annotators(queued, "alice")
    assignment = pair_claim_next(project=queued, annotator=alice)
    assert assignment is not None
    label_submit(assignment=assignment, label=LabelInput("left", 0, 2.0))
    label_submit(assignment=assignment, label=LabelInput("right", 2, 5.0))
    history = list(Preference.objects.filter(annotator=alice).order_by("pk"))
    assert [p.is_current for p in history] == [False, True]
    pair = assignment.pair
    shown_left = pair.response_a_id if assignment.slot_order == "ab" else pair.response_b_id
    final = history[-1]
    winner = final.response_a_id if final.choice == "a" else final.response_b_id
    assert winner != shown_left and final.slot_order == assignment.slot_order
    assert final.seconds_spent == 5.0 and final.confidence == 2


@pytest.mark.parametrize(
    ("label", "message"),
    [
        (LabelInput("up", 1, 1.0), "side"),
        (LabelInput("left", 5, 1.0), "confidence"),
        (LabelInput("left", 1, -3.0), "seconds"),
    ],
)
def test_bad_labels_are_refused(queued: Project, label: LabelInput, message: str) -> None:
    (alice,) = annotators(queued, "alice")
    assignment = pair_claim_next(project=queued, annotator=alice)
    assert assignment is not None
    with pytest.raises(LabelRejected, match=message):
        label_submit(assignment=assignment, label=label)
    assert Preference.objects.count() == 0


def test_ties_are_refused_when_the_project_forbids_them(queued: Project) -> None:
    queued.allow_ties = False
    queued.save()
    (alice,) = annotators(queued, "alice")
    assignment = pair_claim_next(project=queued, annotator=alice)
    assert assignment is not None
    assignment.pair.project.allow_ties = False
    with pytest.raises(LabelRejected, match="ties"):
        label_submit(assignment=assignment, label=LabelInput("tie", 1, 1.0))


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_never_share_a_slot(tmp_path: Path) -> None:
    # On PostgreSQL this exercises SKIP LOCKED; on SQLite the IMMEDIATE transactions and the
    # busy timeout, with the web process and the worker writing at once.
    project = Project.objects.create(slug="race", name="Race")
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "q.jsonl", tasks_with_responses(20, 3))
    )
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None])
    people = annotators(project, *[f"p{i}" for i in range(8)])
    barrier = threading.Barrier(len(people))
    errors: list[BaseException] = []

    def work(who: Annotator) -> None:
        try:
            barrier.wait()
            for _ in range(5):
                assignment = pair_claim_next(project=project, annotator=who)
                if assignment is None:
                    return
                label_submit(assignment=assignment, label=LabelInput("left", 1, 1.0))
        except BaseException as exc:  # reported below, in the test thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(who,)) for who in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    slots = list(QueueAssignment.objects.values_list("slot_id", flat=True))
    assert len(slots) == 40 and len(set(slots)) == 40


def test_a_pair_left_open_comes_back_to_its_annotator(queued: Project) -> None:
    (alice,) = annotators(queued, "alice")
    first = pair_claim_next(project=queued, annotator=alice)
    assert first is not None
    QueueSlot.objects.update(lease_until=timezone.now() - timedelta(minutes=1))  # walked away
    again = pair_claim_next(project=queued, annotator=alice)
    assert again is not None and again.pk == first.pk
    assert QueueSlot.objects.get(pk=first.slot_id).lease_until > timezone.now()
    # Labeling everything, the one-expert queue can be finished.
    assignment: QueueAssignment | None = again
    while assignment is not None:
        label_submit(assignment=assignment, label=LabelInput("left", 1, 1.0))
        assignment = pair_claim_next(project=queued, annotator=alice)
    assert QueueSlot.objects.filter(done_at__isnull=True).count() == 0


def test_rebuilding_after_a_change_in_one_task_keeps_the_others(
    project: Project, tmp_path: Path
) -> None:
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "q.jsonl", tasks_with_responses(3, 7))
    )
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None], pairs_per_task=8)
    before = set(
        QueuePair.objects.exclude(task__external_id="t0").values_list(
            "response_a_id", "response_b_id"
        )
    )
    extra = [{"type": "response", "id": "t0/r9", "task": "t0", "content": "late"}]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "r.jsonl", extra))
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None], pairs_per_task=8)
    after = set(
        QueuePair.objects.exclude(task__external_id="t0").values_list(
            "response_a_id", "response_b_id"
        )
    )
    assert after == before and len(before) == 16


def test_rebuilding_drops_pairs_no_longer_wanted_unless_served(
    project: Project, tmp_path: Path
) -> None:
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "q.jsonl", tasks_with_responses(1, 5))
    )
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None], pairs_per_task=10)
    assert QueuePair.objects.count() == 10  # all pairs of 5 responses
    (alice,) = annotators(project, "alice")
    served = pair_claim_next(project=project, annotator=alice)
    assert served is not None
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None], pairs_per_task=4)
    remaining = set(QueuePair.objects.values_list("pk", flat=True))
    assert served.pair_id in remaining and len(remaining) <= 5


def _pin_first_pair_of(project: Project, task: str, dimension: Dimension) -> PinnedPair:
    a, b = Response.objects.filter(task__external_id=task).order_by("-pk")[:2]
    return PinnedPair(a.task_id, a.pk, b.pk, dimension.pk)


def test_pinned_pairs_keep_their_overlap_and_survive_rebuilds(
    project: Project, tmp_path: Path
) -> None:
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "q.jsonl", tasks_with_responses(2, 5))
    )
    tone = Dimension.objects.create(project=project, name="tone")
    pinned = _pin_first_pair_of(project, "t1", tone)
    assert queue_pairs_pin(project=project, pairs=[pinned], overlap=3, strategy="check") == 1
    pair = QueuePair.objects.get()
    # Stored in id order whatever order it came in; three slots although the project wants one.
    assert (pair.response_a_id, pair.response_b_id) == (pinned.response_b, pinned.response_a)
    assert (pair.overlap, pair.block, pair.strategy) == (3, 0, "check")
    assert QueueSlot.objects.filter(pair=pair).count() == 3
    # Pinning again adds nothing.
    queue_pairs_pin(project=project, pairs=[pinned], overlap=3, strategy="check")
    assert QueuePair.objects.count() == 1 and QueueSlot.objects.count() == 3
    # A build that selects other pairs neither prunes nor reprioritizes it, and moves it to the
    # block its dimension gets in the build.
    other = Dimension.objects.create(project=project, name="other")
    queue_build(
        project=project, strategy=CoverageFirst(), dimensions=[other, tone], pairs_per_task=1
    )
    pair.refresh_from_db()
    assert (pair.overlap, pair.block, pair.strategy) == (3, 1, "check")
    assert pair.priority >= PINNED_PRIORITY
    assert QueueSlot.objects.filter(pair=pair).count() == 3
    # A build without its dimension puts it after the built blocks.
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None], pairs_per_task=1)
    pair.refresh_from_db()
    assert pair.block == 1
    assert set(QueuePair.objects.filter(block=1).values_list("dimension", flat=True)) == {tone.pk}


def test_pinning_a_pair_the_build_queued_raises_its_overlap_and_keeps_its_labels(
    project: Project, tmp_path: Path
) -> None:
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "q.jsonl", tasks_with_responses(1, 2))
    )
    tone = Dimension.objects.create(project=project, name="tone")
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[tone])
    (alice,) = annotators(project, "alice")
    served = pair_claim_next(project=project, annotator=alice)
    assert served is not None
    label_submit(assignment=served, label=LabelInput("left", 2, 3.0))
    queue_pairs_pin(
        project=project, pairs=[_pin_first_pair_of(project, "t0", tone)], overlap=3, strategy="s"
    )
    pair = QueuePair.objects.get()
    assert pair.overlap == 3 and QueueSlot.objects.filter(pair=pair).count() == 3
    assert QueueSlot.objects.filter(pair=pair, done_at__isnull=False).count() == 1
    assert Preference.objects.filter(is_current=True).count() == 1


def test_a_build_leaves_synthesis_rollouts_to_their_pinned_pairs(
    project: Project, tmp_path: Path
) -> None:
    """A synthesis draw's two responses are paired only with each other, pinned by the
    validation: a build pairs neither with the task's other responses (that would compare
    rollouts of other cells and dimensions) and keeps the pinned pairs through a rebuild."""
    ordinary = [
        {"type": "response", "id": f"a1/plain/{i}", "task": "a1", "content": f"plain {i}"}
        for i in range(2)
    ]
    jsonl_import(
        project=project,
        path=write_jsonl(tmp_path / "s.jsonl", [*synthesis_records(), *ordinary]),
    )
    friendliness = Dimension.objects.get(project=project, name="friendliness")
    draws = SynthesisDraw.objects.exclude(low_response=None).order_by("pk")
    pinned = [
        PinnedPair(d.cell.task_id, d.low_response_id, d.high_response_id, friendliness.pk)
        for d in draws
    ]
    assert len(pinned) == 3
    queue_pairs_pin(project=project, pairs=pinned, overlap=3, strategy="synthesis-validation")
    plain = sorted(
        Response.objects.filter(external_id__contains="/plain/").values_list("pk", flat=True)
    )
    for _ in range(2):  # a build, then a rebuild
        queue_build(project=project, strategy=CoverageFirst(), dimensions=[friendliness, None])
        built = QueuePair.objects.filter(overlap__isnull=True)
        assert set(built.values_list("response_a_id", "response_b_id", "dimension_id")) == {
            (plain[0], plain[1], None),
            (plain[0], plain[1], friendliness.pk),
        }
        kept = QueuePair.objects.filter(overlap=3).values_list("response_a_id", "response_b_id")
        assert sorted(kept) == sorted(tuple(sorted((p.response_a, p.response_b))) for p in pinned)
        assert QueueSlot.objects.filter(pair__overlap=3).count() == 9
