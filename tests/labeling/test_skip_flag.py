"""Skipping and flagging a served pair: the services (the slot goes back, the skipper is not
served the pair again, flags are recorded) and the views (who may skip, flag and see flags)."""

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.flags import FlagInput, FlagRejected, flag_resolve, flags_for_admin, pair_flag
from labeling.imports import jsonl_import
from labeling.models import PairFlag, Project, QueueAssignment, QueueSlot
from labeling.queue import (
    LabelInput,
    annotator_for_user,
    assignment_skip,
    label_submit,
    pair_claim_next,
    queue_build,
)
from labeling.strategies import CoverageFirst
from tests.conftest import member
from tests.labeling.helpers import write_jsonl


def queued(project: Project, tmp_path: Path, *, tasks: int = 3, overlap: int = 1) -> Project:
    records: list[dict[str, Any]] = []
    for t in range(tasks):
        records.append({"type": "task", "id": f"t{t}", "prompt": f"Prompt {t}", "split": "meta"})
        for r in range(2):
            records.append({"type": "response", "id": f"t{t}/r{r}", "task": f"t{t}", "content": f"Answer {t}.{r}", "source": "hidden-model"})  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "q.jsonl", records))
    project.overlap = overlap
    project.save(update_fields=["overlap"])
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None])
    return project


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_skip_frees_the_slot_for_others_and_never_serves_the_skipper_again(
    project: Project, tmp_path: Path, expert_user: User, admin_user: User
) -> None:
    queued(project, tmp_path, tasks=2)
    eve = annotator_for_user(project=project, user=expert_user)
    first = pair_claim_next(project=project, annotator=eve)
    assert first is not None
    assert assignment_skip(assignment=first)
    slot = QueueSlot.objects.get(pk=first.slot_id)
    assert slot.claimed_by_id is None and slot.done_at is None

    # The skipper gets the other pair, then nothing: the skipped one is not served back.
    following = pair_claim_next(project=project, annotator=eve)
    assert following is not None and following.pair_id != first.pair_id
    label_submit(assignment=following, label=LabelInput(side="left", confidence=2, seconds=3))
    assert pair_claim_next(project=project, annotator=eve) is None

    # Someone else is served the skipped pair, on the slot the skipper gave back.
    ada = annotator_for_user(project=project, user=admin_user)
    other = pair_claim_next(project=project, annotator=ada)
    assert other is not None and other.pair_id == first.pair_id and other.slot_id == slot.pk


def test_a_labeled_pair_is_not_skipped(project: Project, tmp_path: Path, expert_user: User) -> None:
    queued(project, tmp_path, tasks=1)
    eve = annotator_for_user(project=project, user=expert_user)
    assignment = pair_claim_next(project=project, annotator=eve)
    assert assignment is not None
    label_submit(assignment=assignment, label=LabelInput(side="tie", confidence=1, seconds=None))
    assert not assignment_skip(assignment=assignment)
    assignment.refresh_from_db()
    assert assignment.skipped_at is None
    assert QueueSlot.objects.get(pk=assignment.slot_id).done_at is not None


def test_flag_records_the_reason_and_skips_the_pair(
    project: Project, tmp_path: Path, expert_user: User
) -> None:
    queued(project, tmp_path, tasks=2)
    eve = annotator_for_user(project=project, user=expert_user)
    assignment = pair_claim_next(project=project, annotator=eve)
    assert assignment is not None
    flag = pair_flag(assignment=assignment, flag=FlagInput(reason="identical", note="  same text "))
    assert (flag.pair_id, flag.annotator_id, flag.reason, flag.note) == (
        assignment.pair_id,
        eve.pk,
        "identical",
        "same text",
    )
    assignment.refresh_from_db()
    assert assignment.skipped_at is not None
    following = pair_claim_next(project=project, annotator=eve)
    assert following is not None and following.pair_id != assignment.pair_id

    # Flagging again replaces the reason (one flag per pair and annotator).
    pair_flag(assignment=assignment, flag=FlagInput(reason="other", note="changed my mind"))
    assert PairFlag.objects.get().reason == "other"
    with pytest.raises(FlagRejected):
        pair_flag(assignment=following, flag=FlagInput(reason="boring"))
    with pytest.raises(FlagRejected):
        pair_flag(assignment=following, flag=FlagInput(reason="other", note="x" * 2001))
    assert PairFlag.objects.count() == 1


def test_resolving_a_flag_and_reflagging_reopens_it(
    project: Project, tmp_path: Path, expert_user: User, admin_user: User
) -> None:
    queued(project, tmp_path, tasks=1)
    eve = annotator_for_user(project=project, user=expert_user)
    assignment = pair_claim_next(project=project, annotator=eve)
    assert assignment is not None
    flag = pair_flag(assignment=assignment, flag=FlagInput(reason="unclear"))
    assert list(flags_for_admin(project=project)) == [flag]
    assert flag_resolve(project=project, flag_id=flag.pk, user=admin_user)
    assert not flag_resolve(project=project, flag_id=flag.pk, user=admin_user)
    assert list(flags_for_admin(project=project)) == []
    resolved = flags_for_admin(project=project, resolved=True).get()
    assert resolved.resolved_by == admin_user and resolved.resolved_at is not None
    other = Project.objects.create(slug="elsewhere", name="Elsewhere")
    assert not flag_resolve(project=other, flag_id=flag.pk, user=admin_user)
    pair_flag(assignment=assignment, flag=FlagInput(reason="offensive"))
    assert flags_for_admin(project=project).get().resolved_at is None


def test_skip_and_flag_views_answer_with_the_next_card(
    project: Project, tmp_path: Path, expert_user: User
) -> None:
    queued(project, tmp_path, tasks=3)
    client = client_for(expert_user)
    client.get(reverse("label", args=["acme"]))
    first = QueueAssignment.objects.get()
    html = client.post(reverse("label-skip", args=["acme", first.pk])).content.decode()
    second = QueueAssignment.objects.exclude(pk=first.pk).get()
    assert f'data-assignment="{second.pk}"' in html
    assert "data-intro" not in html  # passing a pair on puts the block's introduction away
    refused = client.post(reverse("label-flag", args=["acme", second.pk]), {"reason": "meh"})
    assert refused.status_code == 400 and "reason must be one of" in refused.content.decode()
    flagged = client.post(
        reverse("label-flag", args=["acme", second.pk]),
        {"reason": "offensive", "note": "slurs in response 2"},
    )
    assert flagged.status_code == 200
    assert PairFlag.objects.get().note == "slurs in response 2"
    third = QueueAssignment.objects.exclude(pk__in=[first.pk, second.pk]).get()
    assert f'data-assignment="{third.pk}"' in flagged.content.decode()
    client.post(
        reverse("label-submit", args=["acme", third.pk]), {"side": "left", "confidence": "2"}
    )
    again = client.post(reverse("label-skip", args=["acme", third.pk]))
    assert again.status_code == 400 and "labeled this pair already" in again.content.decode()


def test_nobody_skips_or_flags_anothers_assignment(
    project: Project, tmp_path: Path, expert_user: User, admin_user: User
) -> None:
    queued(project, tmp_path, tasks=1)
    client_for(expert_user).get(reverse("label", args=["acme"]))
    theirs = QueueAssignment.objects.get()
    admin = client_for(admin_user)
    assert admin.post(reverse("label-skip", args=["acme", theirs.pk])).status_code == 404
    flag = admin.post(reverse("label-flag", args=["acme", theirs.pk]), {"reason": "other"})
    assert flag.status_code == 404
    theirs.refresh_from_db()
    assert theirs.skipped_at is None and not PairFlag.objects.exists()
    reviewer = client_for(member(project, "rita", "reviewer"))
    assert reviewer.post(reverse("label-skip", args=["acme", theirs.pk])).status_code == 403


def test_admins_see_and_resolve_flags_experts_do_not(
    project: Project, tmp_path: Path, expert_user: User, admin_user: User, outsider: User
) -> None:
    queued(project, tmp_path, tasks=1)
    eve = annotator_for_user(project=project, user=expert_user)
    assignment = pair_claim_next(project=project, annotator=eve)
    assert assignment is not None
    flag = pair_flag(assignment=assignment, flag=FlagInput(reason="unclear", note="NOTE-41"))
    admin = client_for(admin_user)
    page = admin.get(reverse("flags", args=["acme"])).content.decode()
    assert "NOTE-41" in page and "Prompt unclear" in page and eve.name in page
    assert "(1 open)" in admin.get(reverse("queue", args=["acme"])).content.decode()

    expert = client_for(expert_user)
    assert expert.get(reverse("flags", args=["acme"])).status_code == 403
    resolve = reverse("flag-resolve", args=["acme", flag.pk])
    assert expert.post(resolve).status_code == 403
    assert "Flagged pairs" not in expert.get(reverse("queue", args=["acme"])).content.decode()
    assert client_for(outsider).get(reverse("flags", args=["acme"])).status_code == 404

    assert admin.post(resolve).status_code == 302
    flag.refresh_from_db()
    assert flag.resolved_by == admin_user
    page = admin.get(reverse("flags", args=["acme"])).content.decode()
    assert "No open flags." in page and "Recently resolved" in page


def test_the_label_api_skips_and_flags(
    project: Project, tmp_path: Path, expert_user: User, admin_user: User
) -> None:
    queued(project, tmp_path, tasks=3)
    client = client_for(expert_user)

    def post(name: str, body: dict[str, Any]) -> Any:
        url = reverse(name, args=["acme"])
        return client.post(url, json.dumps(body), content_type="application/json")

    first = post("api-queue-next", {}).json()["assignment"]
    assert post("api-skips", {"assignment": first}).status_code == 204
    second = post("api-queue-next", {}).json()["assignment"]
    assert second != first
    refused = post("api-flags", {"assignment": second, "reason": "meh"})
    assert refused.status_code == 400 and "reason" in refused.json()
    flagged = post("api-flags", {"assignment": second, "reason": "identical", "note": "same"})
    assert flagged.status_code == 204
    assert PairFlag.objects.get().note == "same"
    third = post("api-queue-next", {}).json()["assignment"]
    assert third not in {first, second}
    post("api-labels", {"assignment": third, "side": "left", "confidence": 1})
    labeled = post("api-skips", {"assignment": third})
    assert labeled.status_code == 400 and "assignment" in labeled.json()
    # Someone else's assignment is nobody's business: 404, nothing changed.
    other = client_for(admin_user)
    url = reverse("api-skips", args=["acme"])
    answer = other.post(url, json.dumps({"assignment": third}), content_type="application/json")
    assert answer.status_code == 404
