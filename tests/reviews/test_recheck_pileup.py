"""Quick edits do not pile up re-checks: a newer change supersedes the re-check still running
for an older one, which stops before its next judge call; a reorder asks the judge nothing (for
a rubric program and for a pairwise_rubric one, whose comparisons show the whole rubric); and
the re-check shows how far it is, "k of N checks", while it runs.

The edits that arrive while a re-check calls the judge are posted from the fake judge's
responder, i.e. while the run is waiting for an answer, over HTTP like a reviewer's browser."""

import json
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.grading import StageShown, grading_run_execute
from graders.models import Grade, GradingRun, JudgeEndpoint, Metagrader
from graders.services import grader_promote, metagrader_register
from labeling.models import Job, JobStatus, Project, Rubric
from reviews.rubric_recheck import recheck_start, recheck_view
from tests.fakes.openai_server import FakeJudgeServer
from tests.reviews.conftest import CLAUSE_FIXED, generate, review_responder


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def edit(client: Client, rubric: Rubric, key: str, text: str) -> None:
    version = Rubric.objects.get(pk=rubric.pk).version
    response = client.post(
        reverse("rubric-item-save", args=[rubric.task.project.slug, rubric.pk]),
        {"key": key, "version": version, "text": text, "weight": 1},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200, response.content.decode()


def in_own_thread(action: Callable[[], Any]) -> Any:
    """Run `action` as another request would: on its own thread and database connection (the
    fake judge's responder runs inside its event loop, where the ORM refuses to run)."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = action()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    return out.get("value")


def move(client: Client, rubric: Rubric, key: str, direction: str) -> int:
    version = Rubric.objects.get(pk=rubric.pk).version
    return client.post(
        reverse("rubric-item-move", args=[rubric.task.project.slug, rubric.pk]),
        {"key": key, "version": version, "direction": direction},
        headers={"HX-Request": "true"},
    ).status_code


@pytest.mark.django_db
def test_a_reorder_starts_no_re_check_and_grading_again_asks_the_judge_nothing(
    generated: Rubric, reviewer_user: User, fake_judge: FakeJudgeServer
) -> None:
    first = recheck_start(rubric=generated, key=None, user=reviewer_user)
    grading_run_execute(run_id=first.pk)
    calls = fake_judge.call_count
    assert move(client_for(reviewer_user), generated, "c2", "up") == 200

    assert list(generated.items.values_list("key", flat=True)) == ["c2", "c1"]
    assert GradingRun.objects.count() == 1  # nothing the grader reads changed
    again = recheck_start(rubric=generated, key=None, user=reviewer_user)
    grading_run_execute(run_id=again.pk)
    again.refresh_from_db()
    assert fake_judge.call_count == calls
    assert again.usage["calls"] == 0 and again.usage["cache_hits"] == 6


def pairwise_responder(body: dict[str, Any]) -> str:
    if '"winner"' in json.dumps(body.get("response_format", {})):
        return json.dumps({"winner": "a"})
    return review_responder(body)


@pytest.mark.django_db
def test_a_reorder_changes_no_prompt_of_a_pairwise_rubric_program(
    review_project: Project,
    review_judge: JudgeEndpoint,
    reviewer_user: User,
    fake_judge: FakeJudgeServer,
) -> None:
    """Its comparisons show the whole rubric, numbered: in the criteria's own order (c1, c2),
    not the reviewer's, or a reorder would make every comparison a new judge call."""
    fake_judge.responder = pairwise_responder
    grader = metagrader_register(
        project=review_project,
        program=baseline_program("pairwise_rubric").to_json(),
        origin="baseline",
    )
    grader_promote(project=review_project, metagrader=grader)
    generate(review_project, ["t0"])
    rubric = Rubric.objects.get(task__external_id="t0", author_kind="generated")
    first = recheck_start(rubric=rubric, key=None, user=reviewer_user)
    grading_run_execute(run_id=first.pk)
    calls = fake_judge.call_count
    assert move(client_for(reviewer_user), rubric, "c2", "up") == 200

    again = recheck_start(rubric=rubric, key=None, user=reviewer_user)
    grading_run_execute(run_id=again.pk)
    again.refresh_from_db()
    assert fake_judge.call_count == calls  # 3 responses: 6 ordered pairs, all from the cache
    assert again.usage["calls"] == 0 and again.usage["cache_hits"] == 6


@pytest.mark.django_db(transaction=True)
def test_three_quick_edits_supersede_the_running_re_checks_and_bound_the_calls(
    generated: Rubric,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
    reviewer_user: User,
    fake_judge: FakeJudgeServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing is cached yet (as on a fresh demo): each edit lands while the re-check of the
    one before it waits for its second judge answer. 3 responses x 2 criteria = 6 checks."""
    monkeypatch.setattr(StageShown, "INTERVAL_S", 0.0, raising=False)  # every count is shown
    JudgeEndpoint.objects.filter(pk=review_judge.pk).update(max_concurrency=1)
    reviewer = client_for(reviewer_user)
    texts = ["Names the buyer.", "Names the seller.", CLAUSE_FIXED]
    pending = list(texts[1:])
    asked_in_run: list[int] = []
    fragments: list[str] = []

    def responder(body: dict[str, Any]) -> str:
        asked_in_run[-1] += 1
        if asked_in_run[-1] == 2 and pending:
            in_own_thread(lambda: edit(client_for(reviewer_user), generated, "c2", pending.pop(0)))
        elif asked_in_run[-1] == 2:
            status_url = reverse("rubric-recheck-status", args=["acme", generated.pk])
            fragments.append(
                in_own_thread(
                    lambda: (
                        client_for(reviewer_user)
                        .get(status_url, headers={"HX-Request": "true"})
                        .content.decode()
                    )
                )
            )
        return review_responder(body)

    fake_judge.responder = responder
    before = fake_judge.call_count  # the rubric's writing
    edit(reviewer, generated, "c2", texts[0])
    for _ in texts:
        run = GradingRun.objects.order_by("-pk").first()
        assert run is not None
        asked_in_run.append(0)
        grading_run_execute(run_id=run.pk)

    runs = list(GradingRun.objects.order_by("pk").select_related("job"))
    assert len(runs) == 3
    first, second, last = runs
    for older, newer in ((first, second), (second, last)):
        assert older.job.status == JobStatus.CANCELLED
        assert older.job.error == f"Superseded by run #{newer.pk}, after a newer change."
        assert not Grade.objects.filter(run=older).exists()  # nothing half-graded is kept
    assert last.job.status == JobStatus.SUCCEEDED
    # Each superseded run stopped after the answer it was waiting for (one call in flight at
    # a time): 2 calls each, then the last run's 6 checks minus what it found cached. Before,
    # all three ran to the end: 6 + 3 + 3 = 12 calls.
    assert asked_in_run[:2] == [2, 2] and sum(asked_in_run) <= 2 + 2 + 6
    assert fake_judge.call_count - before == sum(asked_in_run)
    view = recheck_view(rubric=generated, grader=rubric_grader_selected)
    assert view.run == last and view.finished and view.key == "c2"
    # While the last one ran, its fragment said how far it was.
    assert len(fragments) == 1 and 'data-state="running"' in fragments[0]
    shown = re.search(r"(\d+) of 6 checks", fragments[0])
    assert shown is not None and 0 < int(shown.group(1)) < 6
    assert Job.objects.filter(status__in=Job.ACTIVE).count() == 0
