"""The converters' output on the real shared data sets imports into the data model."""

import io
from pathlib import Path

import pytest
from django.core.management import call_command

from labeling.imports import jsonl_import
from labeling.models import Preference, Project, Response, Rubric, Task
from tests.conftest import SHARED

DATASETS = SHARED / "datasets"
pytestmark = pytest.mark.skipif(
    not DATASETS.is_dir(),
    reason="needs ../shared/datasets (the shared data set folder beside the repo); a fresh clone has none",
)


def convert(tmp_path: Path, source: str, path: Path) -> Path:
    out = tmp_path / f"{source}.jsonl"
    call_command("convert_dataset", source, str(path), output=out, stderr=io.StringIO())
    return out


def test_tau2_airline_and_retail_import_with_policy_rubrics_and_splits(
    project: Project, tmp_path: Path
) -> None:
    report = jsonl_import(project=project, path=convert(tmp_path, "tau2", DATASETS / "tau2"))
    assert report.counts["task"] == 164 and report.counts["rubric"] == 90
    airline = Task.objects.filter(project=project, domain="airline")
    assert airline.count() == 50
    assert (
        airline.filter(split="train").count() == 30 and airline.filter(split="eval").count() == 20
    )
    first = Task.objects.get(project=project, external_id="airline-0")
    assert "EHGLP3" in first.prompt
    assert first.documents.get().text.startswith("# Airline Agent Policy")
    rubric = Rubric.objects.get(task=first, author_kind="expert")
    assert list(rubric.items.values_list("text", flat=True)) == [
        "Agent should refuse to proceed with the cancellation."
    ]


def test_llmbar_and_mt_bench_import_with_provider_per_source(
    project: Project, tmp_path: Path
) -> None:
    jsonl_import(project=project, path=convert(tmp_path, "llmbar", DATASETS / "llmbar"))
    natural = Preference.objects.filter(task__domain="llmbar-natural")
    assert natural.count() == 100 and set(natural.values_list("provider", flat=True)) == {
        "synthetic"
    }
    mt_bench = Preference.objects.filter(task__domain="mt-bench")
    assert mt_bench.count() == 195 and set(mt_bench.values_list("provider", flat=True)) == {"human"}
    assert Task.objects.filter(domain="mt-bench").count() == 75
    assert Response.objects.filter(task__domain="llmbar-natural").count() == 200
