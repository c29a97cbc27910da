"""Editing a generated rubric: every change a new version with its snapshot, restore, the
readable history, validation, and the optimistic-concurrency refusal of a stale save."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from labeling.models import CriterionGrade, RetiredCriterionGrade, Rubric, RubricRevision
from labeling.rubric_items import GradesMoved, rubric_items_replace
from reviews.rubric_edit import (
    CriterionInvalid,
    RubricConflict,
    criterion_delete,
    criterion_move,
    criterion_save,
    rubric_restore,
)
from reviews.rubric_grader import rubric_writer
from reviews.rubric_history import items_changes, items_diff, rubric_history
from tests.reviews.conftest import CAP, CLAUSE, CLAUSE_FIXED, expert_marks

pytestmark = pytest.mark.django_db


def items(rubric: Rubric) -> list[tuple[str, str, float]]:
    return list(rubric.items.values_list("key", "text", "weight"))


def test_each_change_is_a_version_with_its_snapshot_and_editor(generated: Rubric) -> None:
    assert generated.version == 1
    change = criterion_save(
        rubric=generated,
        seen_version=1,
        key="c2",
        text=f"  {CLAUSE_FIXED} ",
        weight=1.5,
        editor="rob",
    )
    assert change.changed and change.key == "c2" and change.rubric.version == 2
    assert items(change.rubric) == [("c1", CAP, 2.0), ("c2", CLAUSE_FIXED, 1.5)]
    revision = RubricRevision.objects.get(rubric=generated, version=2)
    assert revision.editor == "rob" and revision.items[1] == {
        "id": "c2",
        "text": CLAUSE_FIXED,
        "weight": 1.5,
    }
    added = criterion_save(
        rubric=generated, seen_version=2, key=None, text="Names the buyer.", weight=1, editor="rob"
    )
    assert added.key == "c3" and added.rubric.version == 3
    criterion_delete(rubric=generated, seen_version=3, key="c3", editor="rob")
    # A key once used is never handed out again, so no old grade can attach to a new criterion.
    again = criterion_save(
        rubric=generated, seen_version=4, key=None, text="Names the seller.", weight=1, editor="rob"
    )
    assert again.key == "c4"
    moved = criterion_move(rubric=generated, seen_version=5, key="c4", offset=-1, editor="ann")
    assert [k for k, _, _ in items(moved.rubric)] == [
        "c1",
        "c4",
        "c2",
    ] and moved.rubric.version == 6
    assert RubricRevision.objects.filter(rubric=generated).count() == 6


def test_no_op_changes_make_no_version(generated: Rubric) -> None:
    same = criterion_save(
        rubric=generated, seen_version=1, key="c1", text=CAP, weight=2, editor="rob"
    )
    top = criterion_move(rubric=generated, seen_version=1, key="c1", offset=-1, editor="rob")
    assert not same.changed and not top.changed
    generated.refresh_from_db()
    assert generated.version == 1 and generated.revisions.count() == 1


def test_restore_is_a_new_version_with_the_old_items(generated: Rubric) -> None:
    criterion_save(
        rubric=generated, seen_version=1, key="c2", text=CLAUSE_FIXED, weight=1, editor="rob"
    )
    criterion_delete(rubric=generated, seen_version=2, key="c1", editor="rob")
    restored = rubric_restore(rubric=generated, seen_version=3, version=1, editor="ann")
    assert restored.rubric.version == 4
    assert items(restored.rubric) == [("c1", CAP, 2.0), ("c2", CLAUSE, 1.0)]
    assert RubricRevision.objects.get(rubric=generated, version=4).editor == "ann"
    with pytest.raises(CriterionInvalid, match="does not exist"):
        rubric_restore(rubric=generated, seen_version=4, version=99, editor="ann")


def test_history_reads_what_changed_newest_first(generated: Rubric) -> None:
    criterion_save(
        rubric=generated, seen_version=1, key="c2", text=CLAUSE_FIXED, weight=3, editor="rob"
    )
    history = rubric_history(rubric=Rubric.objects.get(pk=generated.pk))
    assert [(v.version, v.editor, v.is_current) for v in history] == [
        (2, "rob", True),
        (1, f"grader {rubric_writer(rubric=generated).pk}", False),
    ]
    assert history[0].changes == [
        f"Reworded c2: “{CLAUSE}” → “{CLAUSE_FIXED}”",
        "Reweighted c2: 1 → 3",
    ]
    assert [(line.kind, line.text) for line in history[0].diff if line.kind != "hunk"] == [
        ("context", f" [c1] weight 2: {CAP}"),
        ("removed", f"-[c2] weight 1: {CLAUSE}"),
        ("added", f"+[c2] weight 3: {CLAUSE_FIXED}"),
    ]


def test_changes_in_words() -> None:
    before = [{"id": "a", "text": "A", "weight": 1}, {"id": "b", "text": "B", "weight": 1},
              {"id": "c", "text": "C", "weight": 1}]  # fmt: skip
    after = [{"id": "c", "text": "C", "weight": 1}, {"id": "a", "text": "A", "weight": 1},
             {"id": "d", "text": "D\nmore", "weight": 2}]  # fmt: skip
    assert items_changes(before, after) == ["Added d: D\nmore", "Removed b: B", "Reordered: c, a"]
    assert ("added", "+[d] weight 2: D ⏎ more") in [
        (x.kind, x.text) for x in items_diff(before, after)
    ]
    assert items_changes(before, before) == ["No change to the criteria."]


def test_a_stale_save_is_refused_with_the_current_text_and_overwrites_nothing(
    generated: Rubric,
) -> None:
    # Two reviewers opened version 1; the first saves, then the second.
    criterion_save(
        rubric=generated,
        seen_version=1,
        key="c2",
        text="First reviewer's text.",
        weight=1,
        editor="rob",
    )
    with pytest.raises(RubricConflict) as refused:
        criterion_save(
            rubric=generated,
            seen_version=1,
            key="c2",
            text="Second reviewer's text.",
            weight=1,
            editor="ann",
        )
    assert refused.value.rubric.version == 2
    assert refused.value.item == {"id": "c2", "text": "First reviewer's text.", "weight": 1.0}
    generated.refresh_from_db()
    assert generated.version == 2 and items(generated)[1][1] == "First reviewer's text."
    assert not generated.revisions.filter(editor="ann").exists()
    for stale in (
        lambda: criterion_delete(rubric=generated, seen_version=1, key="c1", editor="ann"),
        lambda: criterion_move(rubric=generated, seen_version=1, key="c1", offset=1, editor="ann"),
        lambda: rubric_restore(rubric=generated, seen_version=1, version=1, editor="ann"),
    ):
        with pytest.raises(RubricConflict):
            stale()
    generated.refresh_from_db()
    assert generated.version == 2 and generated.items.count() == 2


@pytest.mark.parametrize(
    ("text", "weight", "field", "message"),
    [
        ("   ", 1.0, "text", "cannot be empty"),
        ("x" * 5001, 1.0, "text", "within 5,000 characters; this one has 5,001"),
        ("Fine.", 0.0, "weight", "greater than 0"),
        ("Fine.", -2.0, "weight", "greater than 0"),
        ("Fine.", float("nan"), "weight", "greater than 0"),
        ("Fine.", 1000.5, "weight", "at most 1000"),
    ],
)
def test_invalid_criteria_are_refused_and_change_nothing(
    generated: Rubric, text: str, weight: float, field: str, message: str
) -> None:
    with pytest.raises(CriterionInvalid) as refused:
        criterion_save(
            rubric=generated, seen_version=1, key="c1", text=text, weight=weight, editor="rob"
        )
    assert message in refused.value.problems[field]
    generated.refresh_from_db()
    assert generated.version == 1 and items(generated)[0] == ("c1", CAP, 2.0)


def test_the_last_criterion_cannot_be_deleted(generated: Rubric) -> None:
    criterion_delete(rubric=generated, seen_version=1, key="c1", editor="rob")
    with pytest.raises(CriterionInvalid, match="at least one criterion"):
        criterion_delete(rubric=generated, seen_version=2, key="c2", editor="rob")
    with pytest.raises(CriterionInvalid, match="no longer in the rubric"):
        criterion_save(
            rubric=generated, seen_version=2, key="c1", text="Back?", weight=1, editor="rob"
        )
    generated.refresh_from_db()
    assert generated.version == 2


def grades(rubric: Rubric) -> list[tuple[str, str, bool]]:
    """(criterion key, response, passed) of the rubric's current expert grades."""
    rows = CriterionGrade.objects.filter(item__rubric=rubric)
    return sorted(rows.values_list("item__key", "response__content", "passed"))


def import_c1_with_another_text(rubric: Rubric) -> GradesMoved:
    """An import that brings key c1 back, at version 3, with a text no grade was given on."""
    with transaction.atomic():
        Rubric.objects.filter(pk=rubric.pk).update(version=3)
        rubric.refresh_from_db()
        return rubric_items_replace(
            rubric=rubric,
            items=[{"id": "c1", "text": "Another criterion.", "weight": 1.0}],
            editor="import",
        )


def test_removing_a_graded_criterion_sets_its_grades_aside_and_a_restore_brings_them_back(
    generated: Rubric,
) -> None:
    expert_marks(generated, {("c1", "GOOD"): True, ("c1", "POOR"): False, ("c2", "GOOD"): True})
    graded = grades(generated)

    removed = criterion_delete(rubric=generated, seen_version=1, key="c1", editor="rob")

    assert removed.grades == GradesMoved(retired=2, restored=0)
    assert [key for key, _, _ in grades(generated)] == ["c2"]
    kept = RetiredCriterionGrade.objects.get(rubric=generated, passed=True)
    assert (kept.item_key, kept.item_text, kept.retired_in_version) == ("c1", CAP, 2)
    assert kept.response.content.startswith("GOOD answer") and kept.annotator.name == "lena"

    restored = rubric_restore(rubric=generated, seen_version=2, version=1, editor="rob")

    assert restored.grades == GradesMoved(retired=0, restored=2)
    assert grades(generated) == graded
    assert not RetiredCriterionGrade.objects.exists()


def test_restored_grades_keep_the_time_they_were_given(generated: Rubric) -> None:
    expert_marks(generated, {("c1", "GOOD"): True, ("c1", "POOR"): False})
    given = timezone.now() - timedelta(days=3)
    CriterionGrade.objects.update(created_at=given)
    criterion_delete(rubric=generated, seen_version=1, key="c1", editor="rob")

    rubric_restore(rubric=generated, seen_version=2, version=1, editor="rob")

    back = CriterionGrade.objects.filter(item__rubric=generated, item__key="c1")
    assert back.count() == 2 and set(back.values_list("created_at", flat=True)) == {given}


def test_a_set_aside_grade_never_overrides_a_newer_one(generated: Rubric) -> None:
    expert_marks(generated, {("c1", "GOOD"): True})
    criterion_delete(rubric=generated, seen_version=1, key="c1", editor="rob")
    # The expert grades the same response on the imported c1.
    import_c1_with_another_text(generated)
    expert_marks(generated, {("c1", "GOOD"): False})

    # A reviewer rewords c1 back to the text of the set-aside grade.
    change = criterion_save(
        rubric=generated, seen_version=3, key="c1", text=CAP, weight=2, editor="rob"
    )

    assert change.grades == GradesMoved(retired=0, restored=0)
    assert [(key, passed) for key, _, passed in grades(generated)] == [("c1", False)]
    assert RetiredCriterionGrade.objects.get().passed is True  # still aside, not lost


def test_a_grade_set_aside_twice_comes_back_once_the_newer_one(generated: Rubric) -> None:
    expert_marks(generated, {("c1", "GOOD"): True})
    criterion_delete(rubric=generated, seen_version=1, key="c1", editor="rob")
    import_c1_with_another_text(generated)
    expert_marks(generated, {("c1", "GOOD"): False})
    criterion_save(rubric=generated, seen_version=3, key="c1", text=CAP, weight=2, editor="rob")
    # The older grade stayed aside (a newer one stands); now the newer one goes aside too.
    criterion_save(
        rubric=generated, seen_version=4, key=None, text="Spare.", weight=1, editor="rob"
    )
    criterion_delete(rubric=generated, seen_version=5, key="c1", editor="rob")
    assert RetiredCriterionGrade.objects.count() == 2

    restored = rubric_restore(rubric=generated, seen_version=6, version=1, editor="rob")

    assert restored.grades == GradesMoved(retired=0, restored=1)
    assert [(key, passed) for key, _, passed in grades(generated)] == [("c1", False)]
    assert not RetiredCriterionGrade.objects.exists()  # the older one was replaced by it


def test_grades_come_back_only_to_the_criterion_they_were_given_on(generated: Rubric) -> None:
    expert_marks(generated, {("c1", "GOOD"): True})
    criterion_delete(rubric=generated, seen_version=1, key="c1", editor="rob")
    # Key c1 back with another text is another criterion: the old text's grade stays aside.
    moved = import_c1_with_another_text(generated)

    assert moved == GradesMoved(retired=0, restored=0)
    assert grades(generated) == []
    assert RetiredCriterionGrade.objects.get().item_text == CAP


@pytest.mark.django_db(transaction=True)
def test_two_saves_at_the_same_moment_one_wins_and_one_is_refused(generated: Rubric) -> None:
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def save(editor: str) -> None:
        try:
            barrier.wait(timeout=10)
            criterion_save(
                rubric=generated,
                seen_version=1,
                key="c2",
                text=f"{editor}'s text.",
                weight=1,
                editor=editor,
            )
            outcomes[editor] = "saved"
        except RubricConflict:
            outcomes[editor] = "refused"
        finally:
            connection.close()

    threads = [threading.Thread(target=save, args=(name,)) for name in ("rob", "ann")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes.values()) == ["refused", "saved"]
    winner = next(name for name, outcome in outcomes.items() if outcome == "saved")
    generated.refresh_from_db()
    assert generated.version == 2 and generated.items.get(key="c2").text == f"{winner}'s text."
    assert list(generated.revisions.values_list("version", "editor"))[1:] == [(2, winner)]
