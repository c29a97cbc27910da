"""My labels: every label of the annotator, newest first, filtered by task and paginated, each
revisable in place; never anyone else's."""

from pathlib import Path

from django.contrib.auth.models import User
from django.urls import reverse

from labeling.models import Preference, Project, QueueAssignment
from labeling.my_labels import LABELS_PER_PAGE, my_assignments, my_labels_view
from labeling.queue import LabelInput, annotator_for_user, label_submit, pair_claim_next
from tests.conftest import member
from tests.labeling.test_skip_flag import client_for, queued


def label_all(project: Project, user: User, sides: list[str]) -> list[QueueAssignment]:
    annotator = annotator_for_user(project=project, user=user)
    done = []
    for side in sides:
        assignment = pair_claim_next(project=project, annotator=annotator)
        assert assignment is not None
        label_submit(assignment=assignment, label=LabelInput(side=side, confidence=1, seconds=2))
        done.append(assignment)
    return done


def test_my_labels_lists_only_mine_newest_first_as_i_saw_them(
    project: Project, tmp_path: Path, expert_user: User, admin_user: User
) -> None:
    queued(project, tmp_path, tasks=3, overlap=2)
    mine = label_all(project, expert_user, ["left", "right", "tie"])
    label_all(project, admin_user, ["right", "right", "right"])
    eve = annotator_for_user(project=project, user=expert_user)
    rows = my_labels_view(list(my_assignments(project=project, annotator=eve)))
    assert [r.assignment_id for r in rows] == [a.pk for a in reversed(mine)]
    assert [r.side for r in rows] == ["tie", "right", "left"]
    assert {r.confidence for r in rows} == {1}
    tasks = {a.pk: a.pair.task.external_id for a in mine}
    only = my_assignments(project=project, annotator=eve, task=tasks[mine[1].pk])
    assert [a.pk for a in only] == [mine[1].pk]


def test_revising_an_earlier_label_not_the_previous_one_replaces_it(
    project: Project, tmp_path: Path, expert_user: User
) -> None:
    queued(project, tmp_path, tasks=3)
    first, _, _ = label_all(project, expert_user, ["left", "left", "left"])
    client = client_for(expert_user)
    page = client.get(reverse("label-revise", args=["acme", first.pk])).content.decode()
    # The whole label page (My labels links here), with the earlier choice on the card.
    assert 'id="label-app"' in page and 'data-current-side="left"' in page
    assert f'data-assignment="{first.pk}"' in page
    assert "data-skip>" not in page  # a labeled pair is revised, not skipped
    client.post(
        reverse("label-submit", args=["acme", first.pk]), {"side": "right", "confidence": "2"}
    )
    pair = first.pair
    current = Preference.objects.get(
        response_a=pair.response_a, response_b=pair.response_b, is_current=True
    )
    assert current.confidence == 2
    winner = pair.response_b_id if first.slot_order == "ab" else pair.response_a_id
    assert {"a": current.response_a_id, "b": current.response_b_id}[current.choice] == winner
    assert Preference.objects.filter(annotator__user=expert_user, is_current=True).count() == 3
    rows = client.get(reverse("my-labels", args=["acme"])).content.decode()
    # The revision is now the newest label.
    assert rows.index(f'data-my-label="{first.pk}"') == rows.index("data-my-label=")


def test_my_labels_page_filters_paginates_and_hides_others(
    project: Project, tmp_path: Path, expert_user: User, admin_user: User
) -> None:
    queued(project, tmp_path, tasks=LABELS_PER_PAGE + 2, overlap=2)
    mine = label_all(project, expert_user, ["left"] * (LABELS_PER_PAGE + 1))
    theirs = label_all(project, admin_user, ["right"])
    client = client_for(expert_user)
    first = client.get(reverse("my-labels", args=["acme"])).content.decode()
    assert first.count("data-my-label=") == LABELS_PER_PAGE
    assert f'data-my-label="{mine[-1].pk}"' in first and "Page 1 of 2" in first
    assert f'data-my-label="{theirs[0].pk}"' not in first and "hidden-model" not in first
    second = client.get(reverse("my-labels", args=["acme"]), {"page": 2}).content.decode()
    assert second.count("data-my-label=") == 1 and f'data-my-label="{mine[0].pk}"' in second
    task = mine[3].pair.task.external_id
    filtered = client.get(reverse("my-labels", args=["acme"]), {"task": task}).content.decode()
    expected = {a.pk for a in mine if task in a.pair.task.external_id}
    assert {a.pk for a in mine if f'data-my-label="{a.pk}"' in filtered} == expected
    assert "Your choice" in filtered
    # Another's label is not opened for revision either.
    assert client.get(reverse("label-revise", args=["acme", theirs[0].pk])).status_code == 404
    reviewer = client_for(member(project, "rhea", "reviewer"))
    assert reviewer.get(reverse("my-labels", args=["acme"])).status_code == 403
