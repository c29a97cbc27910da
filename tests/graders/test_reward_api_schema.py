"""The reward API's OpenAPI schema: served at /api/schema/, precise enough for a client to be
generated from it, and fuzzed with schemathesis (valid and invalid requests built from the
schema, sent to the WSGI app with a valid token and the fake judge): no request may make the
server fail (5xx)."""

import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, settings

from config.wsgi import application
from graders.aliases import alias_promote
from graders.engine.programs import KINDS
from graders.models import JudgeEndpoint
from graders.services import grader_promote
from graders.tokens import token_create
from labeling.models import Project, Task
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_reward_api import grader_of, quality_responder

pytestmark = pytest.mark.django_db

SCHEMA_PATH = "/api/schema/?format=json"
EXAMPLES = 25  # per operation: six operations in well under a minute


def test_schema_is_served_and_describes_every_reward_operation(client: Client) -> None:
    response = client.get(SCHEMA_PATH)
    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == {
        "/api/p/{slug}/graders/{grader_id}/reward",
        "/api/p/{slug}/graders/selected/{kind}/reward",
        "/api/p/{slug}/graders/{grader_id}/get_reward",
        "/api/p/{slug}/graders/selected/{kind}/get_reward",
        "/api/p/{slug}/graders/alias/{name}/reward",
        "/api/p/{slug}/graders/alias/{name}/get_reward",
    }
    reward = schema["paths"]["/api/p/{slug}/graders/{grader_id}/reward"]["post"]
    assert reward["security"] == [{"projectToken": []}]
    assert {"200", "400", "401", "403", "404", "413", "429"} <= set(reward["responses"])
    # Every answer names the grader version in a header, and in the body of both shapes.
    for operation in (op["post"] for op in schema["paths"].values()):
        assert "X-Grader-Version" in operation["responses"]["200"]["headers"]
    components = schema["components"]["schemas"]
    responses = components["RewardIn"]["properties"]["responses"]
    assert (responses["minItems"], responses["maxItems"]) == (1, 64)
    assert components["ResponseIn"]["properties"]["content"]["maxLength"] == 1_000_000
    assert components["RewardOut"]["required"] == ["grader", "results", "rewards"]
    assert components["GetRewardIn"]["required"] == ["prompts", "query"]
    assert "grader" in components["GetRewardOut"]["required"]
    assert schema["components"]["securitySchemes"]["projectToken"]["scheme"] == "bearer"
    # The YAML rendering is the default for people reading it.
    assert client.get("/api/schema/")["Content-Type"].startswith("application/vnd.oai.openapi")


@pytest.fixture
def wsgi_in_test_transaction() -> Iterator[None]:
    # Requests through the WSGI app end with close_old_connections, which would close the
    # test's connection mid-transaction; Django's own test client unhooks it the same way.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_target(project: Project, fake_judge: FakeJudgeServer) -> dict[str, Any]:
    fake_judge.responder = quality_responder
    JudgeEndpoint.objects.create(
        project=project, name="fake", base_url=fake_judge.base_url, model="fake-judge",
        max_concurrency=16, is_default=True,
    )  # fmt: skip
    Task.objects.create(project=project, external_id="t0", prompt="Review contract 0")
    graders = {kind: grader_of(project, kind) for kind in KINDS}
    for grader in graders.values():
        grader_promote(project=project, metagrader=grader)
    alias_promote(project=project, name="production", metagrader=graders["scalar"])
    _, raw = token_create(project=project, name="fuzz", scopes=["reward"], rate_per_minute=100_000)
    cache.clear()
    return {"slug": project.slug, "grader_id": graders["scalar"].pk, "token": raw}


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


# Loaded when the module is imported (pytest-django has set Django up by then): the schema
# needs no database. schemathesis.pytest.from_fixture would load it per test, but its lazy
# loader does not run under pytest 9 (it renames test nodes through a removed attribute).
fuzzed = schemathesis.openapi.from_wsgi(SCHEMA_PATH, application)


@fuzzed.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_request_makes_the_server_fail(
    case: Any, fuzz_target: dict[str, Any], wsgi_in_test_transaction: None
) -> None:
    # Random slugs, ids and aliases only reach the 404 path; aim the bodies at real graders
    # (every kind is selected and `production` exists, so those operations grade too).
    case.path_parameters = {
        **case.path_parameters,
        "slug": fuzz_target["slug"],
        **({"grader_id": fuzz_target["grader_id"]} if "grader_id" in case.path_parameters else {}),
        **({"name": "production"} if "name" in case.path_parameters else {}),
    }
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("task_id"), str):
        body["task_id"] = "t0"  # a random id names no task: aim at one that exists
    if isinstance(body, dict) and _strings(body.get("query")) and _strings(body.get("prompts")):
        # One prompt and label per query, and each query starting with its prompt: rules a
        # JSON schema cannot state, which random lists almost never meet.
        size = min(len(body["query"]), len(body["prompts"])) or len(body["query"])
        body["query"] = [p + q for p, q in zip(body["prompts"], body["query"], strict=False)]
        body["prompts"] = body["prompts"][:size]
        if isinstance(body.get("labels"), list):
            body["labels"] = (body["labels"] + [None] * size)[:size]
    if isinstance(case.query, dict) and "group_size" in case.query:
        case.query["wait_s"] = 0  # a gathered sample alone would wait wait_s for its group
    case.call_and_validate(
        headers={"Authorization": f"Bearer {fuzz_target['token']}"},
        checks=[schemathesis.checks.not_a_server_error],
    )
