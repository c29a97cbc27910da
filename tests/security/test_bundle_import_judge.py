"""A bundle upload is one more way to write a judge endpoint (issue 13, items 9 and 1): its
judge must pass the checks the Judges page makes, with the usual field error and nothing
written, where it used to fail with a 500 (ValidationError) or be saved."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from graders.bundles import bundle_build
from graders.engine.baseline import baseline_program
from graders.models import JudgeEndpoint, Metagrader
from graders.services import metagrader_register
from labeling.models import Membership, Project, Role
from tests.fakes.openai_server import FakeJudgeServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def bundle(project: Project, fake_judge: FakeJudgeServer) -> dict[str, Any]:
    JudgeEndpoint.objects.create(
        project=project, name="fake", base_url=fake_judge.base_url, model="m", is_default=True
    )
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    built: dict[str, Any] = json.loads(json.dumps(bundle_build(metagrader=grader)))
    return built


def judge_set(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda bundle: bundle["judge"].update(fields)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (judge_set(api_key_env="SECRET_KEY"), "judge.api_key_env: &#x27;SECRET_KEY&#x27; is not"),
        (
            judge_set(base_url="https://collector.example/v1", api_key_env="OPENAI_API_KEY"),
            "judge.api_key_env: the key in OPENAI_API_KEY may only be sent to api.openai.com:443",
        ),
        (judge_set(base_url="http://10.0.0.5:8000/v1"), "judge.base_url: 10.0.0.5:8000 is a"),
    ],
    ids=["secret-variable", "provider-key-elsewhere", "private-address"],
)
def test_a_bundle_whose_judge_is_not_allowed_is_refused_and_nothing_is_written(
    bundle: dict[str, Any], admin_user: Any, change: Any, message: str
) -> None:
    other = Project.objects.create(slug="other", name="Other")
    Membership.objects.create(project=other, user=admin_user, role=Role.ADMIN)
    change(bundle)
    admin = Client()
    admin.force_login(admin_user)
    upload = SimpleUploadedFile("b.json", json.dumps(bundle).encode())
    response = admin.post(reverse("bundle-import", args=["other"]), {"bundle": upload}, follow=True)
    assert response.status_code == 200 and "Not imported" in response.content.decode()
    assert message in response.content.decode()
    assert not Metagrader.objects.filter(project=other).exists()
    assert not JudgeEndpoint.objects.filter(project=other).exists()
