"""A grader's reward distribution (graders/reward_distribution.py): bins counted in the database
per split of the graded tasks and for the rewards served in training, checked by hand on edge
values; the chart and its table on the grader page; escaping; one statement whatever the
number of grades."""

from itertools import count
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.models import (
    CapturedGroup,
    CapturedResponse,
    Grade,
    GradingRun,
    JudgeEndpoint,
    Metagrader,
)
from graders.reward_distribution import reward_bins, reward_distribution
from graders.services import metagrader_register
from labeling.models import Job, Project, Response, Task

pytestmark = pytest.mark.django_db
HOSTILE = "<script>alert(1)</script>"
_ids = count()


def grader_of(project: Project, kind: str = "scalar", output: str | None = None) -> Metagrader:
    program: dict[str, Any] = baseline_program(kind).to_json()
    if output is not None:
        program["steps"][0]["output"] = {"score": output}
    return metagrader_register(project=project, program=program, origin="human")


def graded(
    grader: Metagrader, split: str, rewards: list[float | None], run_split: str | None = None
) -> None:
    """One run of the grader (on `run_split`, by default the task's) over a new task of
    `split` with one response per reward."""
    project = grader.project
    endpoint, _ = JudgeEndpoint.objects.get_or_create(
        project=project, name="fake", base_url="http://127.0.0.1:9/v1", model="fake"
    )
    run = GradingRun.objects.create(
        project=project, metagrader=grader, endpoint=endpoint,
        split=split if run_split is None else run_split,
        job=Job.objects.create(project=project, kind="grading"),
    )  # fmt: skip
    task = Task.objects.create(project=project, external_id=f"t{next(_ids)}", split=split)
    for reward in rewards:
        response = Response.objects.create(
            project=project, task=task, external_id=f"r{next(_ids)}", content="answer"
        )
        Grade.objects.create(
            run=run, response=response, reward=reward, error="" if reward is not None else "bad"
        )


def served(grader: Metagrader, rewards: list[float | None]) -> None:
    project = grader.project
    task = Task.objects.create(project=project, external_id=f"t{next(_ids)}", split="train")
    group = CapturedGroup.objects.create(
        project=project, task=task, source="reward", metagrader=grader
    )
    for position, reward in enumerate(rewards):
        response = Response.objects.create(
            project=project, task=task, external_id=f"c{next(_ids)}", content="rollout"
        )
        CapturedResponse.objects.create(
            group=group, response=response, task=task, content_hash=str(next(_ids)),
            reward=reward, position=position,
        )  # fmt: skip


def by_key(grader: Metagrader) -> dict[str, Any]:
    return {s.key: s for s in reward_distribution(grader=grader)[1]}


def test_scalar_tenths_hold_their_lower_edge_and_the_last_holds_1(project: Project) -> None:
    grader = grader_of(project)
    # 0.3 * 10 is 3.0000000000000004 and 0.3 / 0.1 is 2.9999999999999996: either way 0.3 is
    # in the bin that starts at 0.3; a hair below it is not.
    graded(grader, "selection", [0.0, 0.1, 0.2999, 0.3, 0.7, 0.95, 1.0, None, None])
    graded(grader, "eval", [0.5, 0.5, 0.6])
    series = by_key(grader)
    assert list(series) == ["selection", "eval"]  # in the splits' order, not the rows'
    selection, eval_ = series["selection"], series["eval"]
    assert selection.counts == [1, 1, 1, 1, 0, 0, 0, 1, 0, 2]
    assert selection.failed == 2 and selection.outside == 0 and selection.rewarded == 7
    assert eval_.counts == [0, 0, 0, 0, 0, 2, 1, 0, 0, 0] and eval_.failed == 0
    # Shares are of the series' own rewards (failed ones apart), so the splits compare.
    assert eval_.shares()[5] == pytest.approx(2 / 3)
    assert selection.shares()[9] == pytest.approx(2 / 7)


def test_pairwise_win_rates_are_centred_on_tenths_so_even_has_its_own_bin(
    project: Project,
) -> None:
    grader = grader_of(project, "pairwise")
    bins = reward_bins(grader)
    assert (bins.count, bins.centred) == (11, True)
    assert bins.ranges()[0] == "0 to under 0.05" and bins.ranges()[5] == "0.45 to under 0.55"
    assert bins.ranges()[10] == "0.95 to 1"
    graded(grader, "selection", [0.0, 0.0499, 0.05, 0.45, 0.5, 0.5499, 0.55, 1.0, None])
    selection = by_key(grader)["selection"]
    assert selection.counts == [2, 1, 0, 0, 0, 3, 1, 0, 0, 0, 1]
    assert selection.failed == 1


def test_an_integer_scale_gets_one_bin_per_value(project: Project) -> None:
    grader = grader_of(project, output="int[1,5]")
    bins = reward_bins(grader)
    assert (bins.low, bins.high, bins.count, bins.centred) == (1, 5, 5, True)
    assert bins.ranges() == ["1", "2", "3", "4", "5"]
    graded(grader, "train", [1, 3, 3, 5])
    assert by_key(grader)["train"].counts == [1, 0, 2, 0, 1]


def test_a_bounded_float_scale_is_cut_in_tenths_of_its_range(project: Project) -> None:
    grader = grader_of(project, output="float[0,10]")
    bins = reward_bins(grader)
    assert (bins.low, bins.high, bins.count, bins.centred) == (0, 10, 10, False)
    graded(grader, "train", [0.0, 9.99, 10.0])
    assert by_key(grader)["train"].counts == [1, 0, 0, 0, 0, 0, 0, 0, 0, 2]


def test_an_unbounded_reward_is_binned_on_0_to_1_with_the_rest_counted_apart(
    project: Project,
) -> None:
    grader = grader_of(project, output="float")
    bins = reward_bins(grader)
    assert bins.assumed and (bins.low, bins.high) == (0, 1)
    graded(grader, "train", [-0.2, 0.5, 1.7])
    train = by_key(grader)["train"]
    assert train.outside == 2 and sum(train.counts) == 1 and train.rewarded == 3
    assert train.shares()[5] == pytest.approx(1 / 3)


def test_a_grade_counts_under_its_run_s_split_or_on_chosen_tasks_under_its_task_s(
    project: Project,
) -> None:
    grader = grader_of(project)
    graded(grader, "eval", [0.1])
    graded(grader, "eval", [0.1, 0.9], run_split="")  # a run on chosen tasks
    graded(grader, "train", [0.5], run_split="selection")  # the task was re-split since
    series = by_key(grader)
    assert series["eval"].counts[1] == 2 and series["eval"].counts[9] == 1
    assert series["selection"].counts[5] == 1 and "train" not in series


def test_rewards_served_in_training_are_a_series_of_their_own(project: Project) -> None:
    grader = grader_of(project)
    other = grader_of(project, output="float[0,2]")
    graded(grader, "selection", [0.5])
    served(grader, [0.9, 1.0, None])
    served(other, [0.1])  # another grader's capture is not counted
    series = by_key(grader)
    assert list(series) == ["selection", "served"]
    assert series["served"].counts[9] == 2 and series["served"].failed == 1
    assert series["served"].label == "served in training"


def test_nothing_graded_has_no_series(project: Project) -> None:
    assert reward_distribution(grader=grader_of(project))[1] == []


def test_one_statement_counts_every_bin(project: Project) -> None:
    grader = grader_of(project)
    for split in ("selection", "eval", "train"):
        graded(grader, split, [0.1 * n for n in range(11)])
    served(grader, [0.2, 0.4])
    with CaptureQueriesContext(connection) as queries:
        reward_distribution(grader=grader)
    assert len(queries) == 1


def program_url(grader: Metagrader) -> str:
    return reverse("program", args=[grader.project.slug, grader.pk])


def test_grader_page_shows_the_chart_with_its_table_and_failed_count(
    project: Project, reviewer_user: User
) -> None:
    grader = grader_of(project)
    Metagrader.objects.filter(pk=grader.pk).update(name=HOSTILE)
    graded(grader, "selection", [0.1, 0.9, None, None, None])
    graded(grader, "eval", [0.95])
    client = Client()
    client.force_login(reviewer_user)
    text = client.get(program_url(grader)).content.decode()
    assert text.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart"') == 1
    assert text.count('<rect class="bar s0"') == 2 + 1  # two bars and the legend's swatch
    assert text.count('<rect class="bar s1"') == 1 + 1
    assert "<p>3 failed</p>" in text
    assert "<caption>Rewards per bin" in text and '<th scope="row">0.9 to 1</th>' in text
    # selection: 0.9 is one of its two rewards; eval: its only one.
    assert '<td class="num">50.0% <small>(1)</small></td>' in text
    assert '<td class="num">100.0% <small>(1)</small></td>' in text
    assert '<abbr class="term" title="eval">held-out evaluation</abbr>' in text
    assert "<script>alert" not in text and "Rewards given by &lt;script&gt;" in text


def test_grader_page_without_grades_says_so(project: Project, reviewer_user: User) -> None:
    grader = grader_of(project)
    client = Client()
    client.force_login(reviewer_user)
    text = client.get(program_url(grader)).content.decode()
    assert "Nothing graded yet" in text and "<caption>Rewards per bin" not in text
    assert 'class="chart"' not in text
