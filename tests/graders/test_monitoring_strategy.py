""" "Watch the shipped grader" (graders/active/monitoring.py): its pool of same-group captured
pairs, the value arithmetic (recency, harm, margin), the recorded chances, the fallback without
captures, its place on the Queue page, and a captured pair served first through the label API.
Groups are stored by the capture service itself (capture_store), or sent through the reward
API to the fake judge."""

import json
from datetime import timedelta
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from graders.active.monitoring import FALLBACK, MONITORING, WatchShippedGrader, captures_for_project
from graders.capture import CaptureGroup, CaptureOrigin, CaptureTask, capture_store
from graders.engine.active.acquisition import recency_value
from graders.engine.programs import ResponseInput
from graders.models import CapturedGroup, CaptureSource, JudgeEndpoint, Metagrader
from labeling.imports import jsonl_import
from labeling.models import Annotator, Dimension, Preference, Project, Provider, QueuePair, Response
from labeling.queue import queue_build, queue_refresh
from labeling.strategies import CandidatePair, CoverageFirst, strategy_for, strategy_specs
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_capture import RUN, TOKEN_NAME, group_body, post, reward_url, token_with
from tests.graders.test_reward_api import grader_of, quality_responder
from tests.labeling.helpers import write_jsonl

START = timezone.now() - timedelta(days=1)


def capture(
    project: Project,
    prompt: str,
    rewards: list[float | None],
    run: str,
    step: int | None,
    minute: int,
) -> CapturedGroup:
    """One captured group of an inline task (`prompt`), responses "<prompt> <run>/<step> #n",
    stored `minute` minutes after START."""
    responses = tuple(
        ResponseInput(str(n), f"{prompt} {run}/{step} #{n}") for n in range(len(rewards))
    )
    task = CaptureTask(stored_id=None, prompt=prompt)
    group = CaptureGroup(task, responses, tuple(rewards), run, step)
    report = capture_store(groups=[group], origin=CaptureOrigin(project, CaptureSource.BULK))
    assert report.captured_groups == 1
    stored = CapturedGroup.objects.latest("pk")
    CapturedGroup.objects.filter(pk=stored.pk).update(created_at=START + timedelta(minutes=minute))
    return stored


def members(group: CapturedGroup) -> list[int]:
    return list(group.members.order_by("position").values_list("response_id", flat=True))


def pair_of(group: CapturedGroup, i: int, j: int) -> CandidatePair:
    ids = members(group)
    a, b = sorted((ids[i], ids[j]))
    return CandidatePair(group.task_id, "unassigned", "", a, b)


def strategy(project: Project, *, epsilon: float, seed: int = 0) -> WatchShippedGrader:
    captures = captures_for_project(project)
    assert captures is not None
    return WatchShippedGrader(captures, epsilon=epsilon, seed=seed)


def test_recency_value_halves_at_the_scale_and_never_reaches_zero() -> None:
    # 1 / (1 + age / 10): ages 0, 5, 10, 30 give 1, 1/1.5, 1/2, 1/4.
    assert recency_value(np.array([0, 5, 10, 30]), scale=10) == pytest.approx(
        [1.0, 1 / 1.5, 0.5, 0.25]
    )
    assert recency_value(np.array([10**12]), scale=10)[0] > 0
    with pytest.raises(ValueError, match="age must be >= 0"):
        recency_value(np.array([-1]), scale=10)
    with pytest.raises(ValueError, match="scale must be a positive number"):
        recency_value(np.array([1]), scale=0)


# The pool -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_pool_is_exactly_the_unlabeled_same_group_captured_pairs(
    project: Project, tmp_path: Path
) -> None:
    records = [
        {"type": "task", "id": "t0", "prompt": "Review contract 0", "split": "eval"},
        {"type": "response", "id": "t0/a", "task": "t0", "content": "imported A"},
        {"type": "response", "id": "t0/b", "task": "t0", "content": "imported B"},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "t.jsonl", records))
    # Task P captured twice (two groups of two); the stored task t0 once, beside its imports.
    early = capture(project, "P", [0.9, 0.1], "run", 1, minute=0)
    late = capture(project, "P", [0.8, 0.3], "run", 2, minute=1)
    stored = CaptureGroup(
        CaptureTask(stored_id="t0", prompt=""),
        (ResponseInput("0", "captured X"), ResponseInput("1", "captured Y")),
        (0.7, 0.2),
        "run",
        3,
    )
    capture_store(groups=[stored], origin=CaptureOrigin(project, CaptureSource.BULK))
    on_t0 = CapturedGroup.objects.get(step=3)
    # Labels: an overall expert label takes early's pair out; one on a dimension or from a
    # generator does not.
    eve = Annotator.objects.create(project=project, name="eve")
    a, b = members(early)
    Preference.objects.create(task_id=early.task_id, response_a_id=b, response_b_id=a,
                              choice="a", provider=Provider.HUMAN, annotator=eve)  # fmt: skip
    a, b = members(late)
    tone = Dimension.objects.create(project=project, name="tone")
    Preference.objects.create(task_id=late.task_id, response_a_id=a, response_b_id=b,
                              choice="a", provider=Provider.HUMAN, annotator=eve,
                              dimension=tone)  # fmt: skip
    Preference.objects.create(task_id=late.task_id, response_a_id=a, response_b_id=b,
                              choice="a", provider=Provider.SYNTHETIC, annotator=eve)  # fmt: skip

    # queue_build queues every pair of each task: P's four responses give 6 pairs (4 across
    # groups), t0's two imported and two captured 6 (1 between the two captured).
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None])
    assert QueuePair.objects.filter(project=project).count() == 12
    Project.objects.filter(pk=project.pk).update(queue_strategy="monitoring", queue_epsilon=0.2)
    project.refresh_from_db()
    assert queue_refresh(project=project) == 12

    drawn = {
        (p.response_a_id, p.response_b_id): (p.probability, p.pool)
        for p in QueuePair.objects.filter(project=project, probability__isnull=False)
    }
    assert set(drawn) == {tuple(sorted(members(late))), tuple(sorted(members(on_t0)))}
    assert {pool for _, pool in drawn.values()} == {2}
    assert sum(chance for chance, _ in drawn.values()) == pytest.approx(1.0)  # type: ignore[misc]
    rest = QueuePair.objects.filter(project=project, probability__isnull=True)
    assert rest.count() == 10 and set(rest.values_list("pool", flat=True)) == {None}
    lowest_drawn = min(
        QueuePair.objects.filter(probability__isnull=False).values_list("priority", flat=True)
    )
    assert all(priority < lowest_drawn for priority in rest.values_list("priority", flat=True))
    assert set(QueuePair.objects.values_list("strategy", flat=True)) == {"monitoring"}


@pytest.mark.django_db
def test_queue_build_pairs_captured_responses_within_their_groups(project: Project) -> None:
    groups = [capture(project, "P", [0.1 * n for n in range(4)], "run", step, minute=step)
              for step in range(16)]  # fmt: skip
    same_group = {tuple(sorted(pair)) for g in groups for pair in combinations(members(g), 2)}
    assert len(same_group) == 16 * 6

    def queued() -> set[tuple[int, int]]:
        return set(QueuePair.objects.values_list("response_a_id", "response_b_id"))

    # Coverage first pairs the 64 responses freely: 2016 pairs are more than 10, so a random
    # chain through all 64 (63 pairs), few of them within one group.
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None])
    assert len(queued()) == 63 and len(queued() & same_group) < 10
    # Watching the grader, every group's 6 pairs and nothing across groups; the unserved
    # cross-group pairs are dropped, and every queued pair is in the pool.
    queue_build(project=project, strategy=strategy(project, epsilon=0.1), dimensions=[None])
    assert queued() == same_group
    assert set(QueuePair.objects.values_list("pool", flat=True)) == {96}
    # Back to Coverage first: pairs across groups again.
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None])
    assert len(queued() - same_group) > 50


# The value ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_recent_steps_of_the_recent_run_come_first_and_stepless_groups_by_capture_time(
    project: Project,
) -> None:
    # Run "old" last captured at minute 3, run "new" at minute 6, run "" (no run named) at
    # minute 9 but with no steps. Ages: "" 9 -> 0, "" 8 -> 1, new/5 -> 2, new/2 -> 3 (step,
    # not capture time, orders a run), old/7 -> 4, old/1 (stepped) -> 5, old stepless -> 6.
    groups = {
        "old/1": capture(project, "A", [1.0, 0.0], "old", 1, minute=0),
        "old/7": capture(project, "B", [1.0, 0.0], "old", 7, minute=1),
        "old/-": capture(project, "C", [1.0, 0.0], "old", None, minute=3),
        "new/5": capture(project, "D", [1.0, 0.0], "new", 5, minute=4),
        "new/2": capture(project, "E", [1.0, 0.0], "new", 2, minute=6),
        "-/8": capture(project, "F", [1.0, 0.0], "", None, minute=8),
        "-/9": capture(project, "G", [1.0, 0.0], "", None, minute=9),
    }
    captures = captures_for_project(project)
    assert captures is not None
    ages = {name: captures.group_age[g.pk] for name, g in groups.items()}
    assert ages == {"-/9": 0, "-/8": 1, "new/5": 2, "new/2": 3, "old/7": 4, "old/1": 5, "old/-": 6}
    # Each pair straddles its group's mean 0.5, so its value is its recency, 1 / (1 + age / 10).
    names = list(groups)
    pairs = [pair_of(groups[name], 0, 1) for name in names]
    watch = strategy(project, epsilon=0.0)
    assert watch.values(pairs) == pytest.approx([1 / (1 + ages[n] / 10) for n in names])
    # With no random share the chance is value / total: the latest pair's the highest.
    chances = [rank.probability for rank in watch.rank(pairs)]
    total = sum(1 / (1 + age / 10) for age in range(7))
    assert chances == pytest.approx([1 / (1 + ages[n] / 10) / total for n in names])
    # Over 2000 seeds each pair is served first about chance * 2000 times (within 4 binomial
    # standard deviations), so the latest step's pair (q = 1 / 5.43 = 0.184, 368 expected)
    # far more often than the oldest (q = 0.625 / 5.43 = 0.115, 230 expected).
    draws = 2000
    first = dict.fromkeys(names, 0)
    for seed in range(draws):
        ranks = strategy(project, epsilon=0.0, seed=seed).rank(pairs)
        first[names[max(range(len(ranks)), key=lambda i: ranks[i].priority)]] += 1
    for name, chance in zip(names, chances, strict=True):
        assert chance is not None
        assert abs(first[name] - chance * draws) < 4 * (draws * chance * (1 - chance)) ** 0.5
    assert first["-/9"] > first["old/-"] + 60


@pytest.mark.django_db
def test_harm_and_margin_raise_a_pair_within_its_group(project: Project) -> None:
    # Rewards 1.0, 0.7, 0.2, 0.0 and a failed grade (None): the group mean is of the four
    # rewards, 1.9 / 4 = 0.475; the single group has age 0, so recency is 1.
    group = capture(project, "H", [1.0, 0.7, 0.2, 0.0, None], "run", 1, minute=0)
    watch = strategy(project, epsilon=0.0)
    assert captures_for_project(project).group_mean[group.pk] == pytest.approx(0.475)  # type: ignore[union-attr]
    cases = {
        # Both above the mean, gap 0.3: margin 0.7, no harm: 0.5 + 0.5 * 0.7.
        (0, 1): 0.85,
        # Both below, gap 0.2: margin 0.8: 0.5 + 0.5 * 0.8.
        (2, 3): 0.9,
        # Straddling the mean (1.0 and 0.0, gap 1, margin 0): harm 1 gives the full value.
        (0, 3): 1.0,
        # A failed grade: the grader could not call it, margin 1.
        (0, 4): 1.0,
    }
    pairs = [pair_of(group, i, j) for i, j in cases]
    assert watch.values(pairs) == pytest.approx(list(cases.values()))


# Chances, epsilon and the fallback -----------------------------------------------------------


@pytest.mark.django_db
def test_the_chance_and_pool_are_recorded_and_epsilon_one_is_uniform(project: Project) -> None:
    group = capture(project, "H", [1.0, 0.7, 0.2, 0.0], "run", 1, minute=0)
    other = capture(project, "H", [0.5, 0.4], "run", 2, minute=1)
    pairs = [pair_of(group, i, j) for i, j in ((0, 1), (2, 3), (0, 3))]
    across = CandidatePair(group.task_id, "unassigned", "", members(group)[0], members(other)[0])
    pairs.append(across)
    # Group "run"/1 is one step back (age 1): recency 1 / 1.1; values 0.85, 0.9, 1.0 times
    # that. With epsilon 0.3 over a pool of three: q = 0.7 * v / sum(v) + 0.3 / 3.
    ranks = strategy(project, epsilon=0.3, seed=5).rank(pairs)
    values = np.array([0.85, 0.9, 1.0]) / 1.1
    expected = 0.7 * values / values.sum() + 0.1
    assert [rank.probability for rank in ranks[:3]] == pytest.approx(list(expected))
    assert [rank.pool for rank in ranks] == [3, 3, 3, None]
    assert ranks[3].probability is None and ranks[3].priority < min(r.priority for r in ranks[:3])
    assert strategy(project, epsilon=0.3, seed=5).rank(pairs) == ranks  # seeded
    uniform = strategy(project, epsilon=1.0).rank(pairs)
    assert [rank.probability for rank in uniform[:3]] == pytest.approx([1 / 3] * 3)
    # Every pool pair labeled: nothing left to draw; all follow in a seeded order, no chance.
    eve = Annotator.objects.create(project=project, name="eve")
    for pair in pairs[:3]:
        Preference.objects.create(task_id=pair.task_id, response_a_id=pair.response_a,
                                  response_b_id=pair.response_b, choice="tie",
                                  provider=Provider.HUMAN, annotator=eve)  # fmt: skip
    done = strategy(project, epsilon=0.3).rank(pairs)
    assert [(rank.probability, rank.pool) for rank in done] == [(None, None)] * 4
    assert len({rank.priority for rank in done}) == 4


@pytest.mark.django_db
def test_the_captures_are_read_in_three_queries_whatever_their_number(
    project: Project, django_assert_num_queries: Any
) -> None:
    for step in range(6):
        capture(project, f"T{step % 2}", [0.1 * step, 0.5, None], "run", step, minute=step)
    with django_assert_num_queries(3):
        captures = captures_for_project(project)
    assert captures is not None and len(captures.group_of) == 18
    assert sorted(captures.group_age.values()) == [0, 1, 2, 3, 4, 5]


@pytest.mark.django_db
def test_without_captures_it_says_how_to_start_and_serves_coverage_first(
    project: Project,
) -> None:
    assert FALLBACK == (
        "no captured rollouts yet: turn capture on for a token (Tokens page) or post production "
        "logs to the capture API; serving Coverage first until then"
    )
    project.queue_strategy = "monitoring"
    choice = strategy_for(project, seed=7)
    assert isinstance(choice.strategy, CoverageFirst) and choice.strategy.seed == 7
    assert choice.fallback == FALLBACK
    capture(project, "P", [0.9, 0.1], "run", 1, minute=0)
    choice = strategy_for(project, seed=7)
    assert isinstance(choice.strategy, WatchShippedGrader) and choice.fallback == ""


@pytest.mark.django_db
def test_the_queue_page_offers_the_strategy_and_says_when_it_cannot_run(
    project: Project, admin_user: User
) -> None:
    assert strategy_specs()[0].name == "coverage"
    assert MONITORING in strategy_specs()
    client = Client()
    client.force_login(admin_user)
    queue = reverse("queue", args=[project.slug])
    text = " ".join(client.get(queue).content.decode().split())
    assert 'value="monitoring"' in text and escape(MONITORING.hint) in text
    Project.objects.filter(pk=project.pk).update(queue_strategy="monitoring")
    text = " ".join(client.get(queue).content.decode().split())
    assert escape(f"Watch the shipped grader cannot run yet: {FALLBACK}.") in text
    capture(project, "P", [0.9, 0.1], "run", 1, minute=0)
    text = client.get(queue).content.decode()
    assert 'id="strategy-fallback"' not in text
    assert "Pairs are served by <strong>Watch the shipped grader</strong>" in text


# Through the reward API and the label API -----------------------------------------------------


@pytest.fixture
def scalar(
    project: Project, tmp_path: Path, fake_judge: FakeJudgeServer, settings: Any
) -> Metagrader:
    """A scalar grader of the fake judge on task t0 (eval, three imported responses), with
    captured groups stored in the request's thread."""
    settings.CAPTURE_QUEUE_SIZE = 0
    cache.clear()  # the reward API's rate counts
    records = [
        {"type": "task", "id": "t0", "prompt": "Review contract 0", "split": "eval"},
        *({"type": "response", "id": f"t0/{word}", "task": "t0", "content": f"imported {word}"}
          for word in ("GOOD", "OKAY", "POOR")),
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "t.jsonl", records))
    fake_judge.responder = quality_responder
    JudgeEndpoint.objects.create(
        project=project, name="fake", base_url=fake_judge.base_url, model="fake-judge",
        is_default=True,
    )  # fmt: skip
    return grader_of(project, "scalar")


@pytest.mark.django_db
def test_the_label_api_serves_a_captured_pair_first_with_nothing_of_its_origin(
    project: Project, scalar: Metagrader, expert_user: User
) -> None:
    raw = token_with(project, rate=1.0)
    for step, words in ((4241, ["GOOD", "POOR"]), (4242, ["OKAY", "POOR"])):
        body = group_body([f"{word} {step}" for word in words], run=RUN, step=step)
        assert post(Client(), reward_url(scalar), body, raw).status_code == 200
    assert CapturedGroup.objects.count() == 2
    Project.objects.filter(pk=project.pk).update(queue_strategy="monitoring", queue_epsilon=0.0)
    project.refresh_from_db()
    choice = strategy_for(project)
    assert choice.fallback == ""
    # t0's seven responses pair within their groups: the three imported ones 3 pairs, each
    # captured group of two 1, and the two captured pairs are the pool.
    queue_build(project=project, strategy=choice.strategy, dimensions=[None])
    assert QueuePair.objects.filter(project=project).count() == 5
    assert QueuePair.objects.filter(project=project, pool=2).count() == 2

    expert = Client()
    expert.force_login(expert_user)
    served = expert.post(reverse("api-queue-next", args=[project.slug]))
    assert served.status_code == 200
    body = served.json()
    assert set(body) == {"assignment", "prompt", "instructions", "documents", "dimension",
                         "left", "right", "current"}  # fmt: skip
    texts = {json.dumps(body["left"]), json.dumps(body["right"])}
    steps = {step for step in ("4241", "4242") if all(step in text for text in texts)}
    assert len(steps) == 1, texts  # both sides from one captured group
    text = served.content.decode()
    for secret in (RUN, TOKEN_NAME, scalar.name, "captur", "0.9", "reward", "run", "step"):
        assert secret not in text, secret
    assert Response.objects.filter(project=project).count() == 7
