"""The continual loop end to end (issue 16, "Done when", first bullet): a training run graded
through the reward API by alias with capture on, experts labeling captured pairs through the
label API, the drift alert, a re-search that finds a grader right on the fresh labels, its
promotion, and a trainer's runtime following `production` across the move.

How the story is scripted, all over real HTTP to the fake judge:

- The judge (loop_responder) scores a response by its quality word (GOOD 0.9, POOR 0.1),
  except on responses carrying LATE (the client's steps 25..49), where a single-call grader is
  fooled and scores the worse response higher. A call made by a verify step (the structured
  proposer's `add_verify_step` block: a second call that re-checks the first against the
  response) gets it right on LATE responses too, so the verify step is what a re-search on the
  fresh labels must find.
- The first search (best-of-N, n = 6, seed 3, argmax) sees only three tasks without LATE,
  labeled by human preferences: every candidate ranks them perfectly and the tie goes to the
  first candidate, the baseline, which has no verify step. It is promoted to `production`; its
  accuracy at selection is 1.0. Preferences, not expert scores: a grading run compares with
  scores whenever any graded response has one (graders/evaluation.py reference_pairs) and
  then ignores every preference, so with scored tasks the fresh labels would not count in the
  re-search.
- 50 captured groups on 50 D_selection tasks, one GOOD and one POOR response each; the expert
  prefers GOOD everywhere, so the production grader agrees on 25 fresh pairs and disagrees on
  25: fresh accuracy 25 / 50 = 0.5, far below 1.0 - margin 0.1 with drift_min_pairs 20 met.
- The re-search copies the first search's settings (n = 6, seed 3) warm-started from the
  production grader. The structured proposer with seed 3 breeds `reason_first +
  add_verify_step` as its fifth proposal; the warm start (the baseline itself) takes the
  baseline's slot, so the re-search's five proposals include it. Its D_selection now holds the
  50 labeled captured tasks, where only a program with the verify step ranks the LATE pairs
  right: it wins, and ranks every fresh pair as the expert did.
"""

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from graders.active.monitoring import monitoring_build
from graders.aliases import alias_promote
from graders.drift import drift_report
from graders.engine.proposer import VERIFY_INSTRUCTION
from graders.engine.runtime import TRLReward, follow_alias
from graders.models import ApiToken, CapturedGroup, Grade, JudgeEndpoint, SearchRun
from graders.research import research_comparison, research_start
from graders.search import search_run_execute, search_start
from graders.tokens import token_create
from labeling.imports import jsonl_import
from labeling.models import Preference, Project
from labeling.queue import queue_build
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.conftest import _answer
from tests.graders.test_search import verifies_with_documents
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENT = "Clause 4: the seller's liability is capped at 10% of the price."
STEPS, DRIFT_FROM = 50, 25
LATE = "LATE"
WAIT_S = 20.0


def loop_responder(body: dict[str, Any]) -> str:
    """See the module docstring: right on everything except LATE responses graded without a
    verify step."""
    text = "\n".join(str(m["content"]) for m in body["messages"])
    schema = body["response_format"]["json_schema"]["schema"]
    good = "GOOD answer" in text
    fooled = LATE in text and VERIFY_INSTRUCTION[:40] not in text
    return _answer(schema, 0.9 if good != fooled else 0.1)


def content(word: str, step: int) -> str:
    return f"{word} answer at step {step}" + (f" {LATE}" if step >= DRIFT_FROM else "")


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


def judged_texts(server: FakeJudgeServer, word: str) -> list[str]:
    with server._lock:
        bodies = [received.body for received in server.requests]
    texts = ["\n".join(str(m["content"]) for m in body["messages"]) for body in bodies]
    return [text for text in texts if word in text]


def run_to_end(search: SearchRun) -> SearchRun:
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    search.refresh_from_db()
    return search


@pytest.fixture
def loop_project(project: Project, tmp_path: Path, settings: Any) -> Project:
    """Three scored D_selection tasks for the first search, and 50 empty D_selection tasks the
    training run's groups name."""
    settings.CAPTURE_QUEUE_SIZE = (
        0  # capture in the request's thread (tests/graders/test_capture.py)
    )
    cache.clear()
    documents = [{"id": "spa", "title": "SPA", "text": DOCUMENT}]
    records: list[dict[str, Any]] = []
    for n in range(3):
        records.append({"type": "task", "id": f"s{n}", "prompt": f"Summarise the risk in deal s{n}.",
                        "domain": "legal", "split": "selection", "documents": documents})  # fmt: skip
        for word in ("GOOD", "POOR"):
            records.append({"type": "response", "id": f"s{n}/{word}", "task": f"s{n}",
                            "content": f"{word} answer for s{n}"})  # fmt: skip
        records.append({"type": "preference", "a": f"s{n}/GOOD", "b": f"s{n}/POOR", "choice": "a",
                        "provider": "human", "annotator": "first-expert"})  # fmt: skip
    for step in range(STEPS):
        records.append({"type": "task", "id": f"c{step}", "prompt": f"Summarise the risk in deal c{step}.",
                        "domain": "legal", "split": "selection", "documents": documents})  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "loop.jsonl", records))
    project.drift_min_pairs, project.drift_margin = 20, 0.1
    project.queue_strategy, project.queue_epsilon = "monitoring", 0.0
    project.save()
    return project


def test_a_training_run_drifts_is_re_searched_and_the_trainer_follows_the_promotion(
    loop_project: Project,
    fake_judge: FakeJudgeServer,
    expert_user: User,
    admin_user: User,
    live_server: Any,
) -> None:
    project = loop_project
    fake_judge.responder = loop_responder
    judge = JudgeEndpoint.objects.create(
        project=project, name="fake", base_url=fake_judge.base_url, model="fake-judge",
        max_concurrency=8, is_default=True,
    )  # fmt: skip
    first = run_to_end(
        search_start(
            project=project,
            kind="scalar",
            mode="best_of_n",
            endpoint=judge,
            n=6,
            seed=3,
            selection_rule="argmax",
        )
    )
    old = first.winner.metagrader
    assert not verifies_with_documents(old.program)
    alias_promote(project=project, name="production", metagrader=old)

    # A trainer's runtime follows `production` from the start of the run.
    export_token = token_create(project=project, name="trainer", scopes=["export"])[1]
    bundle_url = live_server.url + reverse("api-bundle-alias", args=["acme", "production"])
    follower = follow_alias(bundle_url, export_token, recheck_seconds=0)
    try:
        assert follower.content_hash == old.content_hash

        # The training run: 50 groups by alias, capture rate 1.0 on the client's token.
        token, raw = token_create(project=project, name="grpo", scopes=["reward"])
        ApiToken.objects.filter(pk=token.pk).update(capture_rate=1.0)
        client = Client(headers={"Authorization": f"Bearer {raw}"})
        reward_url = reverse("api-reward-alias", args=["acme", "production"])

        def reward(step: int) -> Any:
            body = {"task_id": f"c{step % STEPS}", "run": "grpo-1", "step": step,
                    "responses": [{"id": w, "content": content(w, step)} for w in ("GOOD", "POOR")]}  # fmt: skip
            answer = client.post(reward_url, body, content_type="application/json")
            assert answer.status_code == 200, answer.content
            return answer

        for step in range(STEPS):
            answer = reward(step)
            assert answer["X-Grader-Version"] == old.content_hash
            assert answer.json()["rewards"] == ([0.9, 0.1] if step < DRIFT_FROM else [0.1, 0.9])
        assert CapturedGroup.objects.filter(metagrader=old).count() == STEPS

        # Experts label the captured pairs through the label API, served by the monitoring
        # strategy (epsilon 0: every captured pair before any other).
        choice = monitoring_build(project, 0)
        assert choice.fallback == ""
        queue_build(project=project, strategy=choice.strategy, dimensions=[None])
        expert = Client()
        expert.force_login(expert_user)
        next_url, labels_url = (
            reverse("api-queue-next", args=["acme"]),
            reverse("api-labels", args=["acme"]),
        )
        for _ in range(STEPS):
            served = expert.post(next_url, "{}", content_type="application/json").json()
            assert "answer at step" in served["left"]["content"]  # a captured pair
            side = "left" if served["left"]["content"].startswith("GOOD") else "right"
            label = {"assignment": served["assignment"], "side": side}
            posted = expert.post(labels_url, json.dumps(label), content_type="application/json")
            assert posted.status_code == 200
        assert (
            Preference.objects.filter(provider="human", annotator__user=expert_user).count()
            == STEPS
        )

        # Drift: 25 of 50 fresh pairs agree, 0.5 against 1.0 at selection.
        report = drift_report(grader=old)
        assert report["selection"]["accuracy"]["value"] == 1.0
        assert report["overall"]["pairs"] == STEPS
        assert report["overall"]["value"] == pytest.approx(0.5)
        assert report["overall"]["ci"][1] < 1.0 - 0.1
        assert report["alert"]
        by_bucket = {b["first_step"]: b["accuracy"]["value"] for b in report["buckets"]}
        assert by_bucket[0] == 1.0 and by_bucket[40] == 0.0  # steps 0-9 agree, 40-49 do not
        assert report["not_scored"]["count"] == 0  # every fresh label is on a captured pair
        manager = Client()
        manager.force_login(admin_user)
        page = manager.get(reverse("drift", args=["acme", old.pk])).content.decode()
        assert "Fresh accuracy 0.500" in page
        assert reverse("grader-research", args=["acme", old.pk]) in page  # the one click

        # The re-search on the current labels finds a program right on the fresh labels.
        search = run_to_end(research_start(project=project, grader=old))
        new = search.winner.metagrader
        assert new != old and verifies_with_documents(new.program)
        comparison = research_comparison(search)
        assert comparison is not None and comparison.better
        rewards = dict(
            Grade.objects.filter(run=search.winner.selection_run).values_list(
                "response__content", "reward"
            )
        )
        for step in range(STEPS):
            assert rewards[content("GOOD", step)] > rewards[content("POOR", step)], step

        # The trainer's runtime: a group is in flight on the judge when the alias moves.
        reward_fn = TRLReward(follower, num_generations=2)
        results: dict[str, Any] = {}

        def grade(word: str) -> None:
            completions = [f"{quality} answer {word} {LATE}" for quality in ("GOOD", "POOR")]
            results[word] = reward_fn(["Summarise the risk in deal c0."] * 2, completions,
                                      task_id=["c0", "c0"])  # fmt: skip

        fake_judge.hold()
        in_flight = threading.Thread(target=grade, args=["alpha"])
        in_flight.start()
        wait_for(lambda: fake_judge.held == 2)

        # Promotion moves `production` while that group is being graded.
        alias_promote(project=project, name="production", metagrader=new)
        after = threading.Thread(target=grade, args=["beta"])
        after.start()
        wait_for(lambda: fake_judge.held >= 4)
        fake_judge.release()
        in_flight.join(WAIT_S)
        after.join(WAIT_S)
        # The group in flight kept the old version to its end (fooled); the next was the new.
        assert results == {"alpha": [0.1, 0.9], "beta": [0.9, 0.1]}
        assert not any(VERIFY_INSTRUCTION[:40] in t for t in judged_texts(fake_judge, "alpha"))
        assert any(VERIFY_INSTRUCTION[:40] in t for t in judged_texts(fake_judge, "beta"))
        assert follower.content_hash == new.content_hash

        # The client's next answer names the new version, in the header and the body.
        answer = reward(STEPS)
        assert answer["X-Grader-Version"] == new.content_hash
        assert answer.json()["grader"]["content_hash"] == new.content_hash
        assert answer.json()["rewards"] == [0.9, 0.1]  # a LATE group, ranked right
    finally:
        follower.close()
