"""The project home's next step by role (labeling/next_steps.py), with the counts that say why
and the button's target, on hand-made projects."""

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling import next_steps
from labeling.access import ProjectAccess
from labeling.imports import jsonl_import
from labeling.models import Annotator, Membership, Project, Role, Task
from labeling.next_steps import next_step
from labeling.queue import LabelInput, annotator_for_user, label_submit, pair_claim_next
from tests.conftest import member
from tests.labeling.helpers import write_jsonl
from tests.labeling.test_queue import queued  # noqa: F401

pytestmark = pytest.mark.django_db


def step_for(project: Project, user: User) -> tuple[str, str, str] | None:
    role = Membership.objects.get(project=project, user=user).role
    step = next_step(ProjectAccess(project, role), user)
    return None if step is None else (step.text, step.button, step.url)


def test_an_expert_is_sent_to_the_pairs_waiting_for_them(
    queued: Project,  # noqa: F811 (the fixture imported above)
) -> None:
    eve = member(queued, "eve", Role.EXPERT)
    text, button, url = step_for(queued, eve)
    waiting = int(text.split()[0])
    assert text == f"{waiting} pairs to label" and waiting > 1
    assert (button, url) == ("Start labeling", reverse("label", args=[queued.slug]))
    # One label later, one pair fewer for her, and none fewer for a colleague.
    assignment = pair_claim_next(
        project=queued, annotator=annotator_for_user(project=queued, user=eve)
    )
    assert assignment is not None
    label_submit(assignment=assignment, label=LabelInput("left", 1, 2.0))
    assert step_for(queued, eve)[0] == f"{waiting - 1} pairs to label"
    bob = member(queued, "bob", Role.EXPERT)
    assert (
        step_for(queued, bob)[0] == f"{waiting - 1} pairs to label"
    )  # overlap 1: the slot is done


def test_an_admin_walks_the_path_to_a_first_search(
    project: Project, admin_user: User, tmp_path: Path
) -> None:
    assert step_for(project, admin_user) == (
        "No tasks yet: import tasks and responses (JSON Lines) to start",
        "Import",
        reverse("import", args=[project.slug]),
    )
    records = [{"type": "task", "id": f"t{i}", "prompt": f"Prompt {i}"} for i in range(3)]
    records += [
        {"type": "response", "id": f"t{i}/{k}", "task": f"t{i}", "content": f"answer {k}"}
        for i in range(3)
        for k in "ab"
    ]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "t.jsonl", records))
    text, button, _ = step_for(project, admin_user)
    assert text.startswith("3 tasks without a split") and button == "Assign splits"
    Task.objects.filter(project=project, external_id__in=["t0", "t1"]).update(split="selection")
    text, button, _ = step_for(project, admin_user)
    assert (
        text.startswith("No expert labels yet on the 2 tasks of the selection split")
        and button == "Open the queue"
    )
    labels = [{"type": "preference", "a": "t0/a", "b": "t0/b", "choice": "a", "annotator": "x"}]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "l.jsonl", labels))
    assert step_for(project, admin_user) == (
        "1 selection-split task with expert labels: enough to search",
        "Search for a grader",
        reverse("searches", args=[project.slug]),
    )


@pytest.mark.parametrize(
    "label",
    [
        {"type": "preference", "a": "t0/a", "b": "t0/b", "choice": "a", "annotator": "x"},
        {"type": "score", "response": "t0/b", "value": 0.5, "provider": "expert"},
    ],
    ids=["human-preference", "expert-score"],
)
def test_either_kind_of_expert_label_ends_the_labels_step(
    project: Project, admin_user: User, tmp_path: Path, label: dict[str, object]
) -> None:
    """The setup step asks for each kind of label apart: either one alone is enough, and a
    label of another kind (a true-grader score, a label outside the selection) is not."""
    records = [
        {"type": "task", "id": "t0", "prompt": "P", "split": "selection"},
        {"type": "task", "id": "t1", "prompt": "P", "split": "train"},
        *(
            {"type": "response", "id": f"t{i}/{k}", "task": f"t{i}", "content": k}
            for i in (0, 1)
            for k in "ab"
        ),
        {"type": "score", "response": "t0/a", "value": 0.5, "provider": "true_grader"},
        {"type": "preference", "a": "t1/a", "b": "t1/b", "choice": "a", "annotator": "x"},
        {"type": "score", "response": "t1/a", "value": 0.5, "provider": "expert"},
    ]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "t.jsonl", records))
    assert step_for(project, admin_user)[0].startswith("No expert labels yet on the 1 task")
    jsonl_import(project=project, path=write_jsonl(tmp_path / "l.jsonl", [label]))
    assert step_for(project, admin_user)[0] == (
        "1 selection-split task with expert labels: enough to search"
    )


def test_a_reviewer_is_sent_to_unreviewed_rubrics_and_the_home_shows_the_button(
    project: Project, reviewer_user: User, tmp_path: Path
) -> None:
    assert step_for(project, reviewer_user) is None
    records = [
        {"type": "task", "id": "t0", "prompt": "Prompt"},
        {"type": "rubric", "task": "t0", "author": "generated", "origin": "g1",
         "items": [{"id": "c1", "text": "Cites the clause."}]},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "r.jsonl", records))
    assert step_for(project, reviewer_user) == (
        "1 generated rubric not reviewed yet",
        "Review rubrics",
        reverse("rubric-list", args=[project.slug]),
    )
    client = Client()
    client.force_login(reviewer_user)
    page = client.get(reverse("project-overview", args=[project.slug])).content.decode()
    assert 'id="next-step-button"' in page and "1 generated rubric not reviewed yet" in page


def test_the_home_counts_for_a_new_expert_without_making_their_annotator_row(
    queued: Project,  # noqa: F811 (the fixture imported above)
) -> None:
    eve = member(queued, "eve", Role.EXPERT)
    client = Client()
    client.force_login(eve)
    home = client.get(reverse("project-overview", args=[queued.slug])).content.decode()
    assert not Annotator.objects.filter(project=queued, user=eve).exists()
    text = step_for(queued, eve)[0]
    assert text.endswith("pairs to label") and text in home
    # The counts are those the annotator row, once the queue makes it, would give.
    annotator_for_user(project=queued, user=eve)
    assert step_for(queued, eve)[0] == text


def test_an_expert_step_stops_counting_past_the_cap(
    queued: Project,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    eve = member(queued, "eve", Role.EXPERT)
    waiting = int(step_for(queued, eve)[0].split()[0])
    monkeypatch.setattr(next_steps, "WAITING_CAP", waiting - 1)
    assert step_for(queued, eve)[0] == f"{waiting - 1}+ pairs to label"
    monkeypatch.setattr(next_steps, "WAITING_CAP", waiting)
    assert step_for(queued, eve)[0] == f"{waiting} pairs to label"
