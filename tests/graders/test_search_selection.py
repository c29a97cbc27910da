"""Selection rules in a real search (DESIGN.md section 8b): each rule's search runs end to end
on the scripted fake judge over HTTP and picks the winner its rule gives on the stored rewards;
under a rule with a split, nothing from D_selection's untouched part reaches the proposer.

Per-task credit is recomputed here from the stored rewards with a direct reading of DESIGN.md
section 7 (tests/graders/test_search.py's tolerant credit), not from the evaluation's record."""

import json
from typing import Any

import numpy as np
import pytest
from django.test import Client

from graders.candidates import candidates_select
from graders.engine.baseline import baseline_program
from graders.engine.judge import Budget
from graders.engine.proposer import BLOCKS_BY_NAME, FRESH_INSTRUCTION, VERIFY_INSTRUCTION
from graders.engine.selection import (
    DEFAULT_RULE,
    SelectionInput,
    SelectionRule,
    selection_select,
    untouched_tasks,
)
from graders.models import (
    Candidate,
    CandidateStatus,
    GradingRun,
    JudgeEndpoint,
    Metagrader,
    Origin,
    SearchRun,
)
from graders.search import TOO_FEW_TO_SPLIT, SearchInvalid, search_run_execute, search_start
from graders.search_proposals import round_propose
from graders.services import metagrader_register
from labeling.models import Project, Score, Task
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.conftest import QUALITY, VERIFIED, verifying_responder
from tests.graders.test_search import pair_credits

pytestmark = pytest.mark.django_db


def task_credit(run: GradingRun, tol: float = 0.1) -> dict[int, tuple[float, int]]:
    """{task: (tolerant credit sum, pairs)} (tests/graders/test_search.py pair_credits)."""
    return {task: (sum(values), len(values)) for task, values in pair_credits(run, tol).items()}


def expected_selection(search: SearchRun) -> tuple[list[Candidate], Any]:
    """The rule applied to credit read directly off the stored rewards."""
    graded = [
        c
        for c in Candidate.objects.filter(search=search).order_by("iteration", "position")
        if c.score is not None
    ]
    credits = [task_credit(c.selection_run) for c in graded]
    tasks = sorted(credits[0])
    inputs = SelectionInput(
        credit=np.array([[credit[t][0] for t in tasks] for credit in credits]),
        pairs=np.array([credits[0][t][1] for t in tasks], dtype=np.float64),
        tasks=np.array(tasks, dtype=np.int64),
        cost=np.array([c.calls_per_response or 0.0 for c in graded]),
        seed=search.seed,
    )
    return graded, selection_select(SelectionRule(search.selection_rule), inputs)


@pytest.mark.parametrize("rule", list(SelectionRule))
def test_a_search_under_each_rule_completes_and_picks_as_its_rule_says(
    search_project: Project, search_judge: JudgeEndpoint, rule: SelectionRule
) -> None:
    search = search_start(
        project=search_project,
        kind="scalar",
        mode="evolutionary",
        endpoint=search_judge,
        n=3,
        iterations=2,
        k=2,
        seed=1,
        selection_rule=rule.value,
    )
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    search.refresh_from_db()
    graded, selection = expected_selection(search)
    assert search.winner_id == graded[selection.winner].pk
    for index, candidate in enumerate(graded):
        # The record the evaluation keeps sums to the stored score.
        by_task = candidate.selection_run.evaluation["by_task"]
        assert {int(t): (c, p) for t, (c, p) in by_task.items()} == task_credit(
            candidate.selection_run
        )
        assert candidate.score == pytest.approx(selection.score[index])
        assert candidate.feedback_score == pytest.approx(selection.feedback[index])
        pick = selection.pick[index]
        assert candidate.pick_score == (None if np.isnan(pick) else pytest.approx(pick))
    last = search.curve[-1]
    assert last["candidate"] == search.winner_id
    assert last["selection"] == pytest.approx(selection.feedback[selection.winner])
    if rule.splits:
        assert selection.untouched is not None
        assert last["untouched"] == pytest.approx(selection.untouched[selection.winner])
    else:
        assert "untouched" not in last


def test_the_proposer_never_reads_an_untouched_tasks_text(
    search_project: Project, search_judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    baseline = baseline_program("scalar").to_json()
    verifying = BLOCKS_BY_NAME["add_verify_step"].apply(baseline) | {"name": "verifier"}
    rescoring = BLOCKS_BY_NAME["add_fresh_rescore"].apply(baseline) | {"name": "rescorer"}

    def responder(body: dict[str, Any]) -> str:
        if "response_format" in body:  # a grading call
            return verifying_responder(body)
        return json.dumps({"programs": [verifying, rescoring]})

    fake_judge.responder = responder
    proposer = JudgeEndpoint.objects.create(
        project=search_project, name="strong", base_url=fake_judge.base_url, model="strong-model"
    )
    search = search_start(
        project=search_project,
        kind="scalar",
        mode="evolutionary",
        endpoint=search_judge,
        proposer=proposer,
        n=2,
        iterations=1,
        k=2,
        selection_rule=SelectionRule.HOLDOUT.value,
    )
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    chosen = candidates_select(search, Candidate.objects.filter(search=search, iteration=0))
    assert chosen is not None
    names = dict(Task.objects.filter(split="selection").values_list("pk", "external_id"))
    feedback = {names[pk] for pk in chosen.feedback_tasks}
    untouched = set(names.values()) - feedback
    assert feedback and untouched
    calls = [r for r in fake_judge.requests if "response_format" not in r.body]
    prompt = calls[-1].body["messages"][-1]["content"]  # round 1, after round 0's results
    assert "feedback part of D_selection" in prompt
    for task in untouched:
        assert f"answer for {task}" not in prompt and f"deal {task}" not in prompt
    assert any(f"answer for {task}" in prompt for task in feedback)  # traces are there
    # The numbers told are the feedback part's, not all of D_selection's.
    for candidate in chosen.candidates:
        assert f"{candidate.feedback_score:.3f} on the feedback part" in prompt


def test_an_unknown_rule_is_refused_with_its_name(
    search_project: Project, search_judge: JudgeEndpoint, admin_user: Any
) -> None:
    with pytest.raises(SearchInvalid, match="unknown selection rule 'bogus'; use one of argmax"):
        search_start(
            project=search_project,
            kind="scalar",
            mode="best_of_n",
            endpoint=search_judge,
            n=1,
            selection_rule="bogus",
        )
    client = Client()
    client.force_login(admin_user)
    response = client.post(
        f"/p/{search_project.slug}/searches/",
        {"kind": "scalar", "mode": "best_of_n", "endpoint": search_judge.pk, "proposer": "",
         "n": 1, "iterations": 0, "k": 3, "seed": 0, "selection_rule": "bogus"},
    )  # fmt: skip
    assert response.status_code == 400
    assert "Select a valid choice. bogus is not one of the available choices." in (
        response.content.decode()
    )
    assert not SearchRun.objects.exists()


def test_a_chosen_rule_with_a_split_needs_two_labeled_selection_tasks(
    search_project: Project, search_judge: JudgeEndpoint
) -> None:
    Score.objects.filter(response__task__external_id__in=["s1", "s2"]).delete()
    for rule in (SelectionRule.HOLDOUT, SelectionRule.THRESHOLDOUT):
        with pytest.raises(SearchInvalid, match="needs at least two labeled D_selection tasks"):
            search_start(
                project=search_project,
                kind="scalar",
                mode="best_of_n",
                endpoint=search_judge,
                n=1,
                selection_rule=rule.value,
            )
    assert not SearchRun.objects.exists()
    search = search_start(
        project=search_project,
        kind="scalar",
        mode="best_of_n",
        endpoint=search_judge,
        n=1,
        selection_rule=SelectionRule.LOWER_BOUND.value,
    )
    assert search.selection_rule == "lower_bound"


def test_the_default_rule_ranks_by_argmax_while_d_selection_cannot_be_split_and_says_why(
    search_project: Project, search_judge: JudgeEndpoint, admin_user: Any
) -> None:
    # With one labeled D_selection task (s3) nothing can be held back: the default search
    # still starts, runs by argmax and stores why; the form's blank rule is that default.
    Score.objects.filter(response__task__external_id__in=["s1", "s2"]).delete()
    client = Client()
    client.force_login(admin_user)
    response = client.post(
        f"/p/{search_project.slug}/searches/",
        {"kind": "scalar", "mode": "evolutionary", "endpoint": search_judge.pk, "proposer": "",
         "n": 1, "iterations": 1, "k": 2, "seed": 0, "selection_rule": ""},
    )  # fmt: skip
    assert response.status_code in (200, 302)
    search = SearchRun.objects.get()
    assert search.selection_rule == SelectionRule.ARGMAX.value
    assert search.selection_note == TOO_FEW_TO_SPLIT
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    search.refresh_from_db()
    graded, selection = expected_selection(search)
    assert search.winner_id == graded[selection.winner].pk
    assert all(c.pick_score == c.score for c in graded)  # argmax: the pick is the score
    page = client.get(f"/p/{search_project.slug}/searches/{search.pk}/").content.decode()
    assert (
        'selection rule: Argmax: highest accuracy on D_selection (naive) <span class="hint">'
        "(too few labeled D_selection tasks to hold any back: ranked by the point estimate)"
    ) in page


def test_the_default_rule_is_holdout_when_d_selection_can_be_split(
    search_project: Project, search_judge: JudgeEndpoint
) -> None:
    search = search_start(
        project=search_project, kind="scalar", mode="best_of_n", endpoint=search_judge, n=1
    )
    assert (search.selection_rule, search.selection_note) == (DEFAULT_RULE.value, "")
    assert DEFAULT_RULE == SelectionRule.HOLDOUT


def test_the_search_page_shows_the_rule_and_the_untouched_side_of_the_curve(
    search_project: Project, search_judge: JudgeEndpoint, admin_user: Any
) -> None:
    search = search_start(
        project=search_project,
        kind="scalar",
        mode="evolutionary",
        endpoint=search_judge,
        n=1,
        iterations=1,
        selection_rule=SelectionRule.HOLDOUT.value,
    )
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    search.refresh_from_db()
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/p/{search_project.slug}/searches/{search.pk}/").content.decode()
    assert "selection rule: Holdout: feedback on four fifths, the pick on the rest" in page
    assert "selection tasks</abbr>, untouched</th>" in page and "Told the proposer" in page
    # The chart draws the untouched series, with its legend entry, from the curve's values.
    untouched = [p["untouched"] for p in search.curve]
    assert len(untouched) == 2 and all(value is not None for value in untouched)
    assert page.count('<circle class="point untouched"') == 2
    assert ">Selection tasks, untouched<title>D_selection</title></text>" in page
    # A search by argmax has no untouched part: neither the column nor the series.
    search.selection_rule = SelectionRule.ARGMAX.value
    search.curve = [
        {k: v for k, v in p.items() if not k.startswith("untouched")} for p in search.curve
    ]
    search.save(update_fields=["selection_rule", "curve"])
    page = client.get(f"/p/{search_project.slug}/searches/{search.pk}/").content.decode()
    assert "untouched</th>" not in page and "Selection tasks, untouched" not in page
    assert 'class="point untouched"' not in page


def test_the_structured_proposer_breeds_from_the_best_by_what_it_was_told(
    search_project: Project, search_judge: JudgeEndpoint
) -> None:
    search = search_start(
        project=search_project,
        kind="scalar",
        mode="evolutionary",
        endpoint=search_judge,
        n=3,
        iterations=1,
        k=6,
        selection_rule=SelectionRule.HOLDOUT.value,
    )
    baseline = baseline_program("scalar").to_json()
    programs = [
        BLOCKS_BY_NAME[block].apply(baseline) | {"name": f"p{number}"}
        for number, block in enumerate(
            ["add_verify_step", "add_fresh_rescore", "reason_first", "wording_strict"]
        )
    ]
    # p3 leads on all of D_selection but was told the least (its lead is on the untouched
    # part): it must not breed.
    for position, (program, score, told) in enumerate(
        zip(programs, [0.6, 0.6, 0.6, 0.9], [0.8, 0.7, 0.6, 0.1], strict=True)
    ):
        Candidate.objects.create(
            search=search,
            metagrader=metagrader_register(
                project=search_project, program=program, origin=Origin.SEARCH
            ),
            iteration=0,
            position=position,
            status=CandidateStatus.GRADED,
            score=score,
            feedback_score=told,
        )
    children = round_propose(search, 1, Budget(), lambda usage: None)
    parents = {c.metagrader.parent_id for c in children}
    named = dict(Metagrader.objects.filter(pk__in=parents).values_list("pk", "name"))
    assert len(children) == 6 and set(named.values()) <= {"p0", "p1", "p2"}


def test_argmax_and_the_holdout_rules_part_ways_when_a_lead_is_on_the_proposers_side(
    search_project: Project, search_judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    """Two proposals: A grades right on the two feedback tasks, B on the untouched one (2.5 of
    3 pairs' credit; elsewhere every reward is 0.5, all ties: 1.5 of 3), and B nearly right on
    one feedback task (its rescore answers 0.9, 0.78, 0.6, averaged with the first call's 0.5:
    rewards 0.7, 0.64, 0.55, leads of 0.06 and 0.09 within the tolerance, 0.15 beyond it:
    0.5 + 0.5 + 1 = 2.0 of 3), which puts B ahead of the baseline there, so the
    shortlist of two by feedback is A (5 / 6) and B (3.5 / 6), not the baseline (3 / 6). On all
    of D_selection A leads, (2.5 + 2.5 + 1.5) / 9 against (2.0 + 1.5 + 2.5) / 9, so argmax
    picks A; the holdout rules pick B, the better on the part the proposer never saw (2.5 / 3
    against 1.5 / 3). The lower bound picks the baseline: a resample draws A's 0.5 task (or
    B's) three times with probability (1/3)^3 = 0.037 > 0.025, so A's and B's 2.5 percentiles
    are 0.5, the baseline's constant 0.5, and the baseline makes one judge call per response to
    the others' two."""
    tasks = dict(Task.objects.filter(split="selection").values_list("pk", "external_id"))
    pks = np.array(sorted(tasks), dtype=np.int64)
    # A seed whose split keeps one of the three tasks untouched.
    seed = next(s for s in range(50) if untouched_tasks(pks, s).sum() == 1)
    held = untouched_tasks(pks, seed)
    b_tasks = {tasks[pk] for pk, kept in zip(pks.tolist(), held.tolist(), strict=True) if kept}
    b_near = min(set(tasks.values()) - b_tasks)  # a feedback task B grades nearly right
    near_scores = {"GOOD": 0.9, "OKAY": 0.78, "POOR": 0.6}
    baseline = baseline_program("scalar").to_json()
    a_program = BLOCKS_BY_NAME["add_verify_step"].apply(baseline) | {"name": "a-verifier"}
    b_program = BLOCKS_BY_NAME["add_fresh_rescore"].apply(baseline) | {"name": "b-rescorer"}

    def responder(body: dict[str, Any]) -> str:
        if "response_format" not in body:
            return json.dumps({"programs": [a_program, b_program]})
        text = "\n".join(str(m["content"]) for m in body["messages"])
        schema = body["response_format"]["json_schema"]["schema"]
        word = next((w for w in QUALITY if f"{w} answer" in text), None)
        task = next((t for t in tasks.values() if f"deal {t}" in text), None)
        right = (VERIFY_INSTRUCTION[:40] in text and task not in b_tasks) or (
            FRESH_INSTRUCTION[:40] in text and task in b_tasks
        )
        near = FRESH_INSTRUCTION[:40] in text and task == b_near
        score = (
            0.5 if word is None else VERIFIED[word] if right else near_scores[word] if near else 0.5
        )
        return json.dumps({name: score for name in schema.get("properties", {})} or score)

    fake_judge.responder = responder
    proposer = JudgeEndpoint.objects.create(
        project=search_project, name="strong", base_url=fake_judge.base_url, model="strong-model"
    )
    winners = {}
    for rule in (SelectionRule.ARGMAX, SelectionRule.LOWER_BOUND, SelectionRule.HOLDOUT,
                 SelectionRule.THRESHOLDOUT):  # fmt: skip
        search = search_start(
            project=search_project,
            kind="scalar",
            mode="best_of_n",
            endpoint=search_judge,
            proposer=proposer,
            n=2,
            seed=seed,
            selection_rule=rule.value,
        )
        assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
        search.refresh_from_db()
        winners[rule] = search.winner.metagrader.name
        if rule == SelectionRule.HOLDOUT:
            told = dict(
                Candidate.objects.filter(search=search).values_list(
                    "metagrader__name", "feedback_score"
                )
            )
            assert told == pytest.approx(
                {"baseline-scalar": 3 / 6, "a-verifier": 5 / 6, "b-rescorer": 3.5 / 6}
            )
    assert winners == {
        SelectionRule.ARGMAX: "a-verifier",
        SelectionRule.LOWER_BOUND: "baseline-scalar",
        SelectionRule.HOLDOUT: "b-rescorer",
        SelectionRule.THRESHOLDOUT: "b-rescorer",
    }
