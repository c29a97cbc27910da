from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.imports import jsonl_import
from labeling.models import Project, Task
from labeling.splits import (
    SplitFractionsInvalid,
    split_counts_allocate,
    splits_assign,
    splits_plan,
)
from tests.labeling.helpers import write_jsonl

FRACTIONS = {"meta": 0.2, "selection": 0.2, "train": 0.4, "eval": 0.2}


def test_largest_remainder_allocation_by_hand() -> None:
    # 7 tasks: exact 1.4, 1.4, 2.8, 1.4 -> floors 1, 1, 2, 1 (5); remainders .4 .4 .8 .4:
    # train gets the first extra, then meta (earlier split on equal remainders).
    assert split_counts_allocate(7, FRACTIONS) == {"meta": 2, "selection": 1, "train": 3, "eval": 1}
    assert split_counts_allocate(10, FRACTIONS) == {
        "meta": 2,
        "selection": 2,
        "train": 4,
        "eval": 2,
    }
    assert split_counts_allocate(1, FRACTIONS) == {"meta": 0, "selection": 0, "train": 1, "eval": 0}
    assert split_counts_allocate(0, FRACTIONS) == {"meta": 0, "selection": 0, "train": 0, "eval": 0}


@pytest.fixture
def three_domains(project: Project, tmp_path: Path) -> Project:
    tasks = [
        {"type": "task", "id": f"{domain}-{i}", "domain": domain, "prompt": "p"}
        for domain, n in (("legal", 10), ("airline", 7), ("banking", 4))
        for i in range(n)
    ]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "t.jsonl", tasks))
    return project


def test_splits_are_stratified_by_domain_and_reproducible(three_domains: Project) -> None:
    table = splits_assign(project=three_domains, fractions=FRACTIONS, seed=3)
    assert table["legal"] == {"meta": 2, "selection": 2, "train": 4, "eval": 2}
    assert table["airline"] == {"meta": 2, "selection": 1, "train": 3, "eval": 1}
    first = dict(Task.objects.values_list("external_id", "split"))
    assert Task.objects.filter(domain="legal", split="train").count() == 4
    splits_assign(project=three_domains, fractions=FRACTIONS, seed=3)
    assert dict(Task.objects.values_list("external_id", "split")) == first
    splits_assign(project=three_domains, fractions=FRACTIONS, seed=4)
    assert dict(Task.objects.values_list("external_id", "split")) != first


def test_held_out_domain_goes_wholly_to_eval(three_domains: Project) -> None:
    table = splits_assign(project=three_domains, fractions=FRACTIONS, holdout_domains=("banking",))
    assert table["banking"] == {"meta": 0, "selection": 0, "train": 0, "eval": 4}
    assert set(Task.objects.filter(domain="banking").values_list("split", flat=True)) == {"eval"}


@pytest.mark.parametrize(
    ("fractions", "holdout", "message"),
    [
        ({"meta": 0.5, "eval": 0.4}, (), "add up to 1"),
        ({"meta": 0.5, "test": 0.5}, (), "unknown split"),
        (FRACTIONS, ("retail",), "no tasks in held-out domain"),
    ],
)
def test_bad_split_requests_change_nothing(
    three_domains: Project, fractions: dict[str, float], holdout: tuple[str, ...], message: str
) -> None:
    with pytest.raises(SplitFractionsInvalid, match=message):
        splits_assign(project=three_domains, fractions=fractions, holdout_domains=holdout)
    assert set(Task.objects.values_list("split", flat=True)) == {"unassigned"}


def _splits(project: Project) -> dict[str, str]:
    return dict(Task.objects.filter(project=project).values_list("external_id", "split"))


def test_the_splits_page_previews_the_moves_and_writes_only_when_confirmed(
    three_domains: Project, admin_user: User
) -> None:
    client = Client()
    client.force_login(admin_user)
    url = reverse("splits", args=["acme"])
    form = {"meta": 0.2, "selection": 0.2, "train": 0.4, "eval": 0.2, "seed": 3}
    before = _splits(three_domains)
    preview = client.post(url, form)
    assert preview.status_code == 200 and _splits(three_domains) == before  # nothing written
    html = preview.content.decode()
    plan = splits_plan(project=three_domains, fractions=FRACTIONS, seed=3)
    # 21 unassigned tasks: legal 2/2/4/2, airline 2/1/3/1, banking 1/1/1/1.
    assert plan.moves == {
        ("unassigned", "meta"): 5, ("unassigned", "selection"): 4,
        ("unassigned", "train"): 8, ("unassigned", "eval"): 4,
    }  # fmt: skip
    assert "21 of 21 tasks would change split; 0 stay where they are." in html
    unassigned = '<abbr class="term" title="unassigned">not in a split</abbr>'
    training = '<abbr class="term" title="train">training</abbr>'
    assert f'<tr><td>{unassigned}</td><td>{training}</td><td class="num">8</td></tr>' in html
    assert f'name="confirm" value="{plan.token}"' in html
    # A wrong token writes nothing either, and shows the plan again.
    stale = client.post(url, form | {"confirm": "0" * 32})
    assert stale.status_code == 200 and _splits(three_domains) == before
    assert "nothing was written" in stale.content.decode()
    done = client.post(url, form | {"confirm": plan.token})
    assert done.status_code == 302 and done["Location"] == url
    assert _splits(three_domains) != before
    table = splits_plan(project=three_domains, fractions=FRACTIONS, seed=3).table
    assert table["legal"] == {"meta": 2, "selection": 2, "train": 4, "eval": 2}
    # The same settings again move nothing, and there is nothing to confirm.
    again = client.post(url, form).content.decode()
    assert "nothing to change" in again and 'name="confirm"' not in again


def test_a_confirmation_is_refused_when_the_tasks_changed_after_the_preview(
    three_domains: Project, admin_user: User
) -> None:
    client = Client()
    client.force_login(admin_user)
    url = reverse("splits", args=["acme"])
    form = {"meta": 0.5, "selection": 0, "train": 0, "eval": 0.5, "seed": 1}
    token = splits_plan(project=three_domains, fractions={"meta": 0.5, "eval": 0.5}, seed=1).token
    Task.objects.create(project=three_domains, external_id="legal-new", domain="legal", prompt="p")
    before = _splits(three_domains)
    response = client.post(url, form | {"confirm": token})
    assert response.status_code == 200 and _splits(three_domains) == before
    assert "changed since the preview" in response.content.decode()
    assert "22 of 22 tasks would change split" in response.content.decode()
