from pathlib import Path

import pytest

from labeling.imports import jsonl_import
from labeling.models import Project, Task
from labeling.splits import SplitFractionsInvalid, split_counts_allocate, splits_assign
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
