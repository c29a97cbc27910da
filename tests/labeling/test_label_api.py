"""The label API: claim the next pair and label it, as the label page does, blind like it."""

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import Membership, Preference, Project, QueueAssignment, Response, Role
from tests.labeling.test_label_views import SECRETS, client_for, secretive  # noqa: F401

NEXT = reverse("api-queue-next", args=["acme"])
LABELS = reverse("api-labels", args=["acme"])


def post(client: Client, url: str, body: dict[str, Any] | None = None) -> Any:
    return client.post(url, json.dumps(body or {}), content_type="application/json")


def test_a_claim_returns_the_pair_as_the_annotator_sees_it_and_nothing_of_its_origin(
    secretive: Project,  # noqa: F811 (the fixture imported above)
    expert_user: User,
) -> None:
    answer = post(client_for(expert_user), NEXT)
    assert answer.status_code == 200
    body = answer.json()
    assignment = QueueAssignment.objects.get()
    assert body["assignment"] == assignment.pk
    assert set(body) == {
        "assignment", "prompt", "instructions", "documents", "dimension", "left", "right",
        "current",
    }  # fmt: skip
    assert body["prompt"] == "Answer the customer." and body["current"] is None
    # Left and right in the served order, each only its text or turns.
    a, b = (
        Response.objects.get(pk=assignment.pair.response_a_id),
        Response.objects.get(pk=assignment.pair.response_b_id),
    )
    left, right = (a, b) if assignment.slot_order == "ab" else (b, a)
    assert body["left"] == {"content": left.content, "messages": None}
    assert body["right"] == {"content": right.content, "messages": None}
    # No response ids (one names its model), source model, metadata, scores or other labels.
    text = answer.content.decode()
    for secret in SECRETS:
        assert secret not in text, secret
    # Claiming again before labeling gives the same pair back, not a second one.
    assert post(client_for(expert_user), NEXT).json()["assignment"] == assignment.pk


def test_a_label_is_stored_a_repeat_replaces_it_and_then_the_queue_is_done(
    secretive: Project,  # noqa: F811
    expert_user: User,
) -> None:
    client = client_for(expert_user)
    assignment_id = post(client, NEXT).json()["assignment"]
    assignment = QueueAssignment.objects.get(pk=assignment_id)
    left_id = (
        assignment.pair.response_a_id
        if assignment.slot_order == "ab"
        else assignment.pair.response_b_id
    )
    answer = post(
        client,
        LABELS,
        {"assignment": assignment_id, "side": "left", "confidence": 2, "seconds": 3.5},
    )
    assert answer.status_code == 200
    assert answer.json() == {
        "assignment": assignment_id, "side": "left", "confidence": 2, "seconds": 3.5,
    }  # fmt: skip
    label = Preference.objects.get(provider="human", is_current=True)
    winner = {"a": label.response_a_id, "b": label.response_b_id}[label.choice]
    assert winner == left_id and label.confidence == 2 and label.seconds_spent == 3.5
    assert label.annotator.user == expert_user

    assert post(client, LABELS, {"assignment": assignment_id, "side": "tie"}).status_code == 200
    current = Preference.objects.filter(provider="human", is_current=True)
    assert current.count() == 1 and current.get().choice == "tie"
    assert Preference.objects.filter(provider="human").count() == 2  # the first kept as history

    done = post(client, NEXT)
    assert done.status_code == 204 and done.content == b""


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"side": "up"}, "side", "side must be left, right or tie"),
        ({"side": "left", "confidence": 5}, "confidence", "confidence must be 0, 1 or 2"),
        ({"side": "left", "seconds": -1}, "seconds", "seconds spent must be between"),
        ({"side": "left", "confidence": "x"}, "confidence", "A valid integer is required."),
        ({}, "side", "This field is required."),
    ],
)
def test_a_bad_label_is_a_400_naming_the_field(
    secretive: Project,  # noqa: F811
    expert_user: User,
    body: dict[str, Any],
    field: str,
    message: str,
) -> None:
    client = client_for(expert_user)
    assignment_id = post(client, NEXT).json()["assignment"]
    answer = post(client, LABELS, {"assignment": assignment_id, **body})
    assert answer.status_code == 400
    assert message in answer.json()[field][0]
    assert not Preference.objects.filter(provider="human").exists()


def test_a_project_without_ties_refuses_one_on_the_side_field(
    secretive: Project,  # noqa: F811
    expert_user: User,
) -> None:
    Project.objects.filter(pk=secretive.pk).update(allow_ties=False)
    client = client_for(expert_user)
    assignment_id = post(client, NEXT).json()["assignment"]
    answer = post(client, LABELS, {"assignment": assignment_id, "side": "tie"})
    assert answer.status_code == 400
    assert answer.json() == {"side": ["this project does not allow ties"]}


def test_someone_elses_assignment_is_a_404_and_roles_apply(
    secretive: Project,  # noqa: F811
    expert_user: User,
    reviewer_user: User,
    outsider: User,
) -> None:
    assignment_id = post(client_for(expert_user), NEXT).json()["assignment"]
    other = User.objects.create_user(username="other-expert", password="pw-for-tests-1")
    Membership.objects.create(user=other, project=secretive, role=Role.EXPERT)
    answer = post(client_for(other), LABELS, {"assignment": assignment_id, "side": "left"})
    assert answer.status_code == 404
    assert post(client_for(other), LABELS, {"assignment": 10**6, "side": "left"}).status_code == 404
    assert not Preference.objects.filter(provider="human").exists()
    assert post(client_for(reviewer_user), NEXT).status_code == 403
    assert post(client_for(outsider), NEXT).status_code == 404
    assert post(Client(), NEXT).status_code == 403  # not logged in


def test_a_label_api_write_needs_the_csrf_token(
    secretive: Project,  # noqa: F811
    expert_user: User,
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(expert_user)
    refused = post(client, NEXT)
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    assert not QueueAssignment.objects.exists()
