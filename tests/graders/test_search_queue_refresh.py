"""A search asks for the labeling queue's priorities to be rewritten after each round, in the
background: new candidates change which labels would decide between them."""

from typing import Any

import pytest

from graders import search as search_module
from graders.models import JudgeEndpoint
from graders.search import search_run_execute, search_start
from labeling.models import Project

pytestmark = pytest.mark.django_db


def test_each_round_asks_for_a_refresh_and_one_stays_pending(
    search_project: Project,
    search_judge: JudgeEndpoint,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    asked: list[bool] = []
    real = search_module.queue_refresh_soon

    def recorded(project: Project) -> bool:
        asked.append(real(project))
        return asked[-1]

    monkeypatch.setattr(search_module, "queue_refresh_soon", recorded)
    search = search_start(
        project=search_project, kind="scalar", mode="evolutionary", endpoint=search_judge,
        n=1, iterations=2, k=1, seed=0,
    )  # fmt: skip
    with django_capture_on_commit_callbacks() as sent:
        assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    # Three rounds asked; the first enqueued the task and the others found it pending.
    assert asked == [True, False, False]
    search_project.refresh_from_db()
    assert search_project.queue_refresh_requested_at is not None
    assert len(sent) == 1
