"""The import page's format reference and sample file: the reference is read off the record
models, so it lists what the importer checks; the sample imports cleanly and holds every kind
of labeling record."""

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.import_reference import SAMPLE_PATH, import_reference
from labeling.imports import jsonl_import
from labeling.models import Preference, Project, Response, Rubric, Score, Task
from labeling.records import RECORD_TYPES

pytestmark = pytest.mark.django_db


def test_the_reference_lists_every_record_type_and_its_fields() -> None:
    reference = {record.type: record for record in import_reference()}
    assert list(reference) == list(RECORD_TYPES)
    assert all(record.purpose for record in reference.values())
    preference = {row.name: row for row in reference["preference"].fields}
    assert [name for name, row in preference.items() if row.required] == ["a", "b", "choice"]
    assert preference["choice"].kind == 'one of "a", "b", "tie"'
    assert preference["confidence"].kind == "one of 0, 1, 2 or null"
    assert preference["provider"].default == '"human"'
    score = {row.name: row for row in reference["score"].fields}
    assert score["value"].kind == "number from 0 to 1"
    task = {row.name: row for row in reference["task"].fields}
    assert task["documents"].kind == "list of object: id, title, text"


def test_the_sample_imports_with_every_labeling_record(project: Project) -> None:
    types = {json.loads(line)["type"] for line in SAMPLE_PATH.read_text().splitlines()}
    labeling_types = set(RECORD_TYPES) - {"synthesis", "synthesis_draw"}
    assert types == labeling_types
    jsonl_import(project=project, path=Path(SAMPLE_PATH))  # raises ImportRejected on any error
    assert Task.objects.filter(project=project).count() == 2
    assert Response.objects.filter(project=project).count() == 4
    assert Response.objects.filter(project=project, messages__isnull=False).count() == 1
    assert Rubric.objects.filter(task__project=project).count() == 1
    assert Score.objects.filter(response__project=project).count() == 2
    assert Preference.objects.filter(task__project=project).count() == 3


def test_the_page_shows_the_reference_and_offers_the_sample(
    project: Project, admin_user: User, expert_user: User
) -> None:
    client = Client()
    client.force_login(admin_user)
    html = client.get(reverse("import", args=[project.slug])).content.decode()
    sample_url = reverse("import-sample", args=[project.slug])
    assert f'href="{sample_url}"' in html
    for record_type in RECORD_TYPES:
        assert f'id="record-{record_type}"' in html
    download = client.get(sample_url)
    assert download.status_code == 200
    assert "attachment" in download["Content-Disposition"]
    assert b"".join(download.streaming_content) == SAMPLE_PATH.read_bytes()

    expert = Client()
    expert.force_login(expert_user)
    assert expert.get(sample_url).status_code == 403
