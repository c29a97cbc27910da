"""Criterion trust: agreement of the judge's verdicts with the experts' marks, by hand."""

import pytest

from graders.grading import grading_run_execute
from graders.models import JudgeEndpoint, Metagrader
from graders.services import grading_run_start
from labeling.models import Rubric
from reviews.rubric_edit import criterion_save
from reviews.rubric_review import disagreement_counts, judgement
from reviews.rubric_trust import Trust, attention_order, criterion_trust
from tests.reviews.conftest import CLAUSE_FIXED, expert_marks


def test_trust_and_attention_order_by_hand() -> None:
    judge = {(1, "a"): True, (2, "a"): False, (1, "b"): True, (2, "b"): True, (1, "c"): False}
    experts = [
        (1, "a", True), (2, "a", True),  # a: 1 of 2
        (1, "b", True), (2, "b", True), (2, "b", False),  # b: 2 of 3 (two experts on 2)
        (3, "c", True),  # c: the judge never saw response 3, so no comparison
        (1, "d", False),  # d: the judge has no verdict at all
        (1, "zz", True),  # not a criterion of this rubric
    ]  # fmt: skip
    trust = criterion_trust(keys=["a", "b", "c", "d"], judge=judge, experts=experts)
    assert trust == {
        "a": Trust("a", 1, 2),
        "b": Trust("b", 2, 3),
        "c": Trust("c", 0, 0),
        "d": Trust("d", 0, 0),
    }
    assert trust["a"].share == 0.5 and trust["b"].disagree == 1 and trust["c"].share is None
    # Equal shares: more disagreements first; no comparison last, in rubric order.
    e = Trust("e", 2, 4)
    order = attention_order([trust["c"], trust["b"], e, trust["d"], trust["a"]])
    assert [t.key for t in order] == ["e", "a", "b", "c", "d"]


@pytest.mark.django_db
def test_the_review_matrix_compares_the_latest_run_with_the_experts(
    generated: Rubric, rubric_grader_selected: Metagrader, review_judge: JudgeEndpoint
) -> None:
    run = grading_run_start(
        project=generated.task.project,
        metagrader=rubric_grader_selected,
        endpoint=review_judge,
        task_ids=["t0"],
    )
    grading_run_execute(run_id=run.pk)
    # The judge (conftest.VERDICTS): c1 GOOD pass, OKAY pass, POOR fail;
    # c2 GOOD fail, OKAY pass, POOR pass.
    expert_marks(generated, {("c1", "GOOD"): True, ("c1", "OKAY"): False,
                             ("c2", "GOOD"): True, ("c2", "OKAY"): True, ("c2", "POOR"): False})  # fmt: skip
    expert_marks(generated, {("c1", "GOOD"): True}, name="max")
    view = judgement(rubric=generated, grader=rubric_grader_selected)
    assert view.run == run and view.responses == ["Response 1", "Response 2", "Response 3"]
    # c2 agrees on OKAY only (1 of 3); c1 on GOOD twice, not on OKAY (2 of 3): c2 first.
    assert [(r.item.key, r.trust.agree, r.trust.n) for r in view.rows] == [
        ("c2", 1, 3),
        ("c1", 2, 3),
    ]
    assert view.disagreements == 3
    # Responses in external-id order: good, okay, poor.
    c2 = view.rows[0].cells
    assert [(c.judge, c.experts, c.disagree) for c in c2] == [
        (False, [True], True),
        (True, [True], False),
        (True, [False], True),
    ]
    assert disagreement_counts(rubrics=[generated], grader=rubric_grader_selected) == {
        generated.pk: 3
    }
    # Reworded, c2's old verdicts judged another criterion: shown as stale, not compared.
    criterion_save(
        rubric=generated, seen_version=1, key="c2", text=CLAUSE_FIXED, weight=1, editor="rob"
    )
    after = judgement(rubric=Rubric.objects.get(pk=generated.pk), grader=rubric_grader_selected)
    c2_row = next(r for r in after.rows if r.item.key == "c2")
    assert c2_row.trust.n == 0 and all(c.stale and not c.disagree for c in c2_row.cells)
    assert after.rows[-1].item.key == "c2"  # no comparison: last
