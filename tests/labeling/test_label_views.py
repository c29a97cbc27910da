from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.imports import jsonl_import
from labeling.models import Membership, Preference, Project, QueueAssignment, Role
from labeling.queue import queue_build
from labeling.strategies import CoverageFirst
from tests.labeling.helpers import write_jsonl

SECRETS = (
    "model-SECRET-7",
    "STEERING-TEXT-be-rude",
    "JUDGE-NAME-X",
    "0.4242",
    "steer-gen-Q",
    "TRUE-NOTE",
)


@pytest.fixture
def secretive(project: Project, tmp_path: Path) -> Project:
    records: list[dict[str, Any]] = [
        {"type": "task", "id": "t", "prompt": "Answer the customer.", "split": "meta",
         "metadata": {"generator_note": "TRUE-NOTE"}},
        {"type": "response", "id": "t/r1", "task": "t", "content": "Polite answer.", "source": "model-SECRET-7",
         "metadata": {"steering": "STEERING-TEXT-be-rude"}},
        {"type": "response", "id": "t/model-SECRET-7-id", "task": "t", "content": "Rude answer.", "source": "model-SECRET-7"},
        {"type": "judge_score", "judge": "JUDGE-NAME-X", "response": "t/r1", "score": 0.4242},
        {"type": "score", "response": "t/model-SECRET-7-id", "value": 0.4242},
        {"type": "preference", "a": "t/r1", "b": "t/model-SECRET-7-id", "choice": "a", "provider": "synthetic", "annotator": "steer-gen-Q"},
        {"type": "rubric", "task": "t", "items": [{"id": "c1", "text": "Greets the customer."}]},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "s.jsonl", records))
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None])
    return project


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_pair_html_is_blind(secretive: Project, expert_user: User) -> None:
    client = client_for(expert_user)
    html = client.get(reverse("label", args=["acme"])).content.decode()
    assert "Polite answer." in html and "Rude answer." in html
    assignment = QueueAssignment.objects.get()
    revise = client.get(reverse("label-revise", args=["acme", assignment.pk])).content.decode()
    grading = client.get(reverse("grade", args=["acme"])).content.decode()
    assert "Greets the customer." in grading
    task_page = client.get(reverse("task-detail", args=["acme", "t"])).content.decode()
    api = client.get(reverse("api-task", args=["acme", "t"])).content.decode()
    for page in (html, revise, grading, task_page, api):
        for secret in SECRETS:
            assert secret not in page, secret


def test_label_page_full_and_fragment(secretive: Project, expert_user: User) -> None:
    client = client_for(expert_user)
    full = client.get(reverse("label", args=["acme"])).content.decode()
    assert "<html" in full and 'id="pair-card"' in full and "data-intro" in full
    fragment = client.get(
        reverse("label", args=["acme"]), headers={"HX-Request": "true"}
    ).content.decode()
    assert fragment.lstrip().startswith('<div id="pair-card"') and "<html" not in fragment


def test_submit_answers_with_the_next_card_and_refuses_bad_input(
    secretive: Project, expert_user: User
) -> None:
    client = client_for(expert_user)
    client.get(reverse("label", args=["acme"]))
    assignment = QueueAssignment.objects.get()
    url = reverse("label-submit", args=["acme", assignment.pk])
    bad = client.post(url, {"side": "up", "confidence": "1"})
    assert bad.status_code == 400 and "side must be" in bad.content.decode()
    assert client.post(url, {"side": "left", "confidence": "x"}).status_code == 400
    ok = client.post(url, {"side": "left", "confidence": "2", "seconds": "4.5"})
    assert ok.status_code == 200 and "Nothing left for you to label" in ok.content.decode()
    again = client.post(url, {"side": "left", "confidence": "2", "seconds": "4.5"})
    assert again.status_code == 200
    assert Preference.objects.filter(provider="human").count() == 1


def test_nobody_can_submit_for_someone_elses_assignment(
    secretive: Project, expert_user: User
) -> None:
    client_for(expert_user).get(reverse("label", args=["acme"]))
    assignment = QueueAssignment.objects.get()
    other = User.objects.create_user(username="other-expert", password="pw-for-tests-1")
    Membership.objects.create(user=other, project=secretive, role=Role.EXPERT)
    response = client_for(other).post(
        reverse("label-submit", args=["acme", assignment.pk]), {"side": "left", "confidence": "1"}
    )
    assert response.status_code == 404
    assert not Preference.objects.filter(provider="human").exists()


def test_reviewers_cannot_label(secretive: Project, reviewer_user: User) -> None:
    assert client_for(reviewer_user).get(reverse("label", args=["acme"])).status_code == 403
    assert client_for(reviewer_user).get(reverse("grade", args=["acme"])).status_code == 403
    # ... and are not offered to.
    label_link = f'href="{reverse("label", args=["acme"])}">Start labeling'
    queue = reverse("queue", args=["acme"])
    assert label_link not in client_for(reviewer_user).get(queue).content.decode()


def test_queue_page_builds_for_admins_only(
    secretive: Project, admin_user: User, expert_user: User
) -> None:
    url = reverse("queue", args=["acme"])
    assert "1 / 1" not in client_for(admin_user).get(url).content.decode()
    label_link = f'href="{reverse("label", args=["acme"])}">Start labeling'
    assert label_link in client_for(expert_user).get(url).content.decode()
    assert client_for(expert_user).post(url, {"pairs_per_task": 5, "seed": 1}).status_code == 403
    response = client_for(admin_user).post(url, {"pairs_per_task": 5, "seed": 1}, follow=True)
    assert "Queued 1 pairs." in response.content.decode()


def test_criterion_grading_ignores_expert_rubrics_with_an_origin(
    secretive: Project, expert_user: User, tmp_path: Path
) -> None:
    extra = {
        "type": "rubric",
        "task": "t",
        "author": "expert",
        "origin": "v2",
        "items": [{"id": "z", "text": "Other."}],
    }
    jsonl_import(project=secretive, path=write_jsonl(tmp_path / "x.jsonl", [extra]))
    client = client_for(expert_user)
    first = client.get(reverse("grade", args=["acme"])).content.decode()
    assert "Greets the customer." in first and "Other." not in first
    from labeling.models import RubricItem

    item = RubricItem.objects.get(key="c1", rubric__origin="")
    for response in secretive.responses.all():
        client.post(
            reverse("grade-submit", args=["acme", response.pk]), {f"item-{item.pk}": "pass"}
        )
    assert (
        "No responses with an expert rubric"
        in client.get(reverse("grade", args=["acme"])).content.decode()
    )


def test_the_grading_page_says_how_many_are_left_up_to_the_cap(
    secretive: Project, expert_user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from labeling import next_steps

    client = client_for(expert_user)
    grade = reverse("grade", args=["acme"])
    assert "2 responses left to grade" in client.get(grade).content.decode()
    monkeypatch.setattr(next_steps, "WAITING_CAP", 1)
    assert "1+ responses left to grade" in client.get(grade).content.decode()
