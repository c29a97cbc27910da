"""SSRF and key theft through judge endpoints (issue 13, item 1), as a project admin would try
them: over the Judges page, around it (rows written directly, as a bug or an old install
would leave them), and at call time through grading and the reward API.

The "internal service" is a stand-in on 127.0.0.1 that answers every request with a secret
(in its body and its reason phrase) and records the headers it was sent; the operator's fake
judge (tests/fakes/openai_server.py) is allowed exactly, as `make run` allows its local judge."""

import asyncio
import contextlib
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.engine.judge import ChatRequest, JudgeClient, JudgeSettings
from graders.grading import grading_run_execute
from graders.models import Grade, GradingRun, JudgeEndpoint, Metagrader
from graders.search import search_run_execute, search_start
from graders.services import grader_promote, grading_run_start, metagrader_register
from graders.tokens import token_create
from labeling.imports import jsonl_import
from labeling.models import Project
from reviews.audit import audit_start
from reviews.audit_jobs import audit_run_execute
from reviews.rubric_generation import rubric_generation_execute, rubric_generation_start
from tests.fakes.openai_server import FakeJudgeServer
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db

SECRET = "INTERNAL-SECRET-7f3a"
PROVIDER_KEY = "sk-operator-secret-value"


class InternalService:
    """HTTP on 127.0.0.1 answering `status` with `body` and a secret reason phrase; every
    request's headers are kept in `requests`."""

    def __init__(self, status: int = 200, body: bytes = SECRET.encode()) -> None:
        self.status, self.body = status, body
        self.requests: list[dict[str, str]] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                service.requests.append(dict(self.headers.items()))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(service.status, f"{SECRET} reason")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(service.body)))
                self.end_headers()
                self.wfile.write(service.body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host_port = f"127.0.0.1:{self.server.server_address[1]}"
        self.base_url = f"http://{self.host_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def internal() -> Iterator[InternalService]:
    service = InternalService()
    yield service
    service.close()


@pytest.fixture(autouse=True)
def rate_counts_cleared() -> None:
    cache.clear()


@pytest.fixture
def judged_project(project: Project, tmp_path: Path) -> Project:
    records: list[dict[str, Any]] = [
        {"type": "task", "id": "t0", "prompt": "Review the contract", "split": "eval"},
        {"type": "rubric", "task": "t0", "items": [{"id": "e1", "text": "Cites the cap."}]},
        {"type": "response", "id": "t0/r0", "task": "t0", "content": "GOOD answer"},
        {"type": "response", "id": "t0/r1", "task": "t0", "content": "POOR answer"},
    ]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "t.jsonl", records))
    return project


@pytest.fixture
def scalar(judged_project: Project) -> Metagrader:
    return metagrader_register(
        project=judged_project, program=baseline_program("scalar").to_json(), origin="baseline"
    )


@pytest.fixture
def admin(admin_user: Any) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def endpoint_form(**fields: Any) -> dict[str, Any]:
    return {"name": "mine", "base_url": "https://judge.example/v1", "model": "m",
            "api_key_env": "", "temperature": 0, "max_tokens": 512, "max_concurrency": 4,
            "timeout_s": 10, "price_in_per_mtok": 0, "price_out_per_mtok": 0,
            "response_format": "json_schema"} | fields  # fmt: skip


def save(admin: Client, **fields: Any) -> tuple[int, str]:
    response = admin.post(reverse("judges", args=["acme"]), endpoint_form(**fields))
    return response.status_code, response.content.decode()


def written_around_the_form(
    project: Project, base_url: str, api_key_env: str = ""
) -> JudgeEndpoint:
    return JudgeEndpoint.objects.create(
        project=project, name="around", base_url=base_url, model="m", api_key_env=api_key_env,
        timeout_s=10, is_default=True,
    )  # fmt: skip


def grade(project: Project, grader: Metagrader, endpoint: JudgeEndpoint) -> GradingRun:
    run = grading_run_start(project=project, metagrader=grader, endpoint=endpoint, split="eval")
    with contextlib.suppress(ValidationError):  # the job records why it failed
        grading_run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def reward(grader: Metagrader) -> Any:
    raw = token_create(project=grader.project, name="trainer", scopes=["reward"])[1]
    return Client().post(
        reverse("api-reward", args=[grader.project.slug, grader.pk]),
        {"task_id": "t0", "responses": [{"id": "a", "content": "GOOD answer"}]},
        content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )


def everything_shown(run: GradingRun) -> str:
    """What the run shows anyone: its job's messages, its grades' errors and traces."""
    run.job.refresh_from_db()
    grades = list(Grade.objects.filter(run=run).values("error", "trace"))
    return json.dumps([run.job.error, run.job.stage, run.job.result, grades], default=str)


# Saving an endpoint ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://{internal}/v1",  # the stand-in internal service on loopback
        "http://localhost:{port}/v1",  # a name that resolves to loopback
        "http://[::1]:{port}/v1",
        "http://[::ffff:127.0.0.1]:{port}/v1",  # IPv4-mapped IPv6
        "http://0.0.0.0:{port}/v1",
        "http://169.254.169.254/latest/meta-data",  # cloud metadata, link-local
        "http://10.0.0.5:8000/v1",
        "http://[fd00::5]:8000/v1",
    ],
)
def test_an_endpoint_at_a_non_public_address_is_refused_on_save(
    judged_project: Project, admin: Client, internal: InternalService, url: str
) -> None:
    port = internal.host_port.rsplit(":", 1)[1]
    status, page = save(admin, base_url=url.format(internal=internal.host_port, port=port))
    assert status == 400 and "JUDGE_PRIVATE_HOSTS" in page
    assert not JudgeEndpoint.objects.filter(project=judged_project).exists()
    assert internal.requests == []


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://user:pw@judge.example/v1", "user name or password"),
        ("https://judge.example/v1?api-version=1", "query"),
        ("https://judge.example/v1#x", "fragment"),
        ("ftp://judge.example/v1", "http:// or https://"),
    ],
)
def test_a_base_url_with_userinfo_query_fragment_or_another_scheme_is_refused(
    judged_project: Project, admin: Client, scalar: Metagrader, url: str, problem: str
) -> None:
    status, page = save(admin, base_url=url)
    assert status == 400 and problem in page
    assert not JudgeEndpoint.objects.filter(project=judged_project).exists()
    run = grade(judged_project, scalar, written_around_the_form(judged_project, url))
    assert run.job.status == "failed" and problem in run.job.error


def test_only_the_listed_public_host_and_port_are_open(
    judged_project: Project, admin: Client, settings: Any
) -> None:
    settings.JUDGE_BASE_URL_HOSTS = ["judge.example"]
    assert save(admin, name="other-port", base_url="https://judge.example:8443/v1")[0] == 400
    assert save(admin, name="other-host", base_url="https://judge2.example/v1")[0] == 400
    assert save(admin, name="listed", base_url="https://judge.example/v1")[0] == 302


# Keys ----------------------------------------------------------------------------------------------


def test_a_provider_key_is_refused_for_another_host_on_save(
    judged_project: Project, admin: Client
) -> None:
    status, page = save(admin, base_url="https://judge.example/v1", api_key_env="OPENAI_API_KEY")
    assert status == 400 and "api.openai.com:443" in page and "JUDGE_API_KEY_HOSTS" in page
    assert not JudgeEndpoint.objects.filter(project=judged_project).exists()
    assert save(admin, base_url="https://api.openai.com/v1", api_key_env="OPENAI_API_KEY")[0] == 302


def test_an_unbound_key_variable_is_refused_with_the_setting_to_change(
    judged_project: Project, admin: Client
) -> None:
    status, page = save(admin, api_key_env="JUDGE_KEY_MINE")
    assert status == 400 and "JUDGE_KEY_MINE=host:port to JUDGE_API_KEY_HOSTS" in page


def test_the_operators_key_never_reaches_a_server_the_admin_points_it_at(
    judged_project: Project,
    scalar: Metagrader,
    internal: InternalService,
    settings: Any,
    monkeypatch: Any,
) -> None:
    """Even where the host itself is allowed, the provider's key goes to its provider only:
    grading and the reward API refuse before the key is read, and nothing is sent."""
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    settings.JUDGE_PRIVATE_HOSTS = [internal.host_port]
    endpoint = written_around_the_form(judged_project, internal.base_url, "OPENAI_API_KEY")
    run = grade(judged_project, scalar, endpoint)
    assert run.job.status == "failed" and "JUDGE_API_KEY_HOSTS" in run.job.error
    answer = reward(scalar)
    assert answer.status_code == 503 and "api.openai.com:443" in answer.json()["detail"]
    assert internal.requests == []


def test_a_bound_key_goes_to_its_host_and_nowhere_else(
    judged_project: Project,
    scalar: Metagrader,
    internal: InternalService,
    fake_judge: FakeJudgeServer,
    settings: Any,
    monkeypatch: Any,
) -> None:
    monkeypatch.setenv("JUDGE_KEY_FAKE", PROVIDER_KEY)
    settings.JUDGE_API_KEY_HOSTS = [f"JUDGE_KEY_FAKE={fake_judge.host_port}"]
    settings.JUDGE_PRIVATE_HOSTS = [*settings.JUDGE_PRIVATE_HOSTS, internal.host_port]
    fake_judge.responder = lambda body: json.dumps({"score": 0.5})
    bound = written_around_the_form(judged_project, fake_judge.base_url, "JUDGE_KEY_FAKE")
    assert grade(judged_project, scalar, bound).job.status == "succeeded"
    assert fake_judge.requests[0].headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    JudgeEndpoint.objects.filter(pk=bound.pk).update(base_url=internal.base_url)
    bound.refresh_from_db()
    assert grade(judged_project, scalar, bound).job.status == "failed"
    assert internal.requests == []


# At call time --------------------------------------------------------------------------------


def rubric_writing(project: Project, endpoint: JudgeEndpoint) -> None:
    grader = metagrader_register(
        project=project, program=baseline_program("rubric").to_json(), origin="baseline"
    )
    grader_promote(project=project, metagrader=grader)
    job = rubric_generation_start(project=project, split="eval")
    with contextlib.suppress(ValidationError):
        rubric_generation_execute(job_id=job.pk)


def auditing(project: Project, endpoint: JudgeEndpoint) -> None:
    run = audit_start(project=project, endpoint=endpoint, split="eval")
    with contextlib.suppress(ValidationError):
        audit_run_execute(run_id=run.pk)


@pytest.mark.parametrize("path", [rubric_writing, auditing], ids=["rubric-writing", "audit"])
@pytest.mark.parametrize("host", ["{internal}", "localhost:{port}"])
def test_no_judge_path_reaches_the_internal_service(
    judged_project: Project, internal: InternalService, host: str, path: Any
) -> None:
    """Grading and the reward API are above; rubric writing and audits get their judge the
    same way (graders.services.endpoint_settings) and are refused the same way."""
    port = internal.host_port.rsplit(":", 1)[1]
    url = f"http://{host.format(internal=internal.host_port, port=port)}/v1"
    path(judged_project, written_around_the_form(judged_project, url))
    assert internal.requests == []


@pytest.mark.parametrize("host", ["{internal}", "localhost:{port}"])
def test_an_internal_endpoint_written_around_the_form_is_refused_at_call_time(
    judged_project: Project, scalar: Metagrader, internal: InternalService, host: str
) -> None:
    port = internal.host_port.rsplit(":", 1)[1]
    url = f"http://{host.format(internal=internal.host_port, port=port)}/v1"
    run = grade(judged_project, scalar, written_around_the_form(judged_project, url))
    shown = everything_shown(run)
    assert SECRET not in shown and "loopback address" in shown
    answer = reward(scalar).content.decode()
    assert SECRET not in answer and "loopback address" in answer
    assert internal.requests == []


def test_a_name_that_resolves_to_loopback_after_it_was_saved_is_refused(
    judged_project: Project, admin: Client, scalar: Metagrader, internal: InternalService,
    monkeypatch: Any,
) -> None:  # fmt: skip
    """DNS rebinding: judge.rebind.example is public when the endpoint is saved, then
    resolves to the internal service. The client checks the address it connects to."""
    real = socket.getaddrinfo
    answers = iter(["93.184.215.14"])
    port = int(internal.host_port.rsplit(":", 1)[1])

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "judge.rebind.example":
            return real(host, *args, **kwargs)
        address = next(answers, "127.0.0.1")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, args[0] if args else 0))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = f"http://judge.rebind.example:{port}/v1"
    assert save(admin, base_url=url, is_default="on")[0] == 302
    run = grade(judged_project, scalar, JudgeEndpoint.objects.get(base_url=url))
    shown = everything_shown(run)
    assert "resolves to a loopback address" in shown and SECRET not in shown
    answer = reward(scalar)
    assert SECRET not in answer.content.decode() and "loopback" in answer.content.decode()
    assert internal.requests == []


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, json.dumps({"error": {"message": SECRET}}).encode()),
        (401, f"<html>{SECRET}</html>".encode()),
        (404, json.dumps({"error": {"message": f"model {SECRET} not found"}}).encode()),
        # A 200 that is not a chat completion, its fields quoted by a parse error before.
        (
            200,
            json.dumps(
                {"choices": [{"message": {"content": "{}"}}], "usage": {"prompt_tokens": SECRET}}
            ).encode(),
        ),
    ],
    ids=["400-json", "401-html", "404-model", "200-not-a-completion"],
)
def test_what_an_allowed_server_answers_is_never_shown_back(
    judged_project: Project, scalar: Metagrader, settings: Any, status: int, body: bytes
) -> None:
    """Allowed hosts too: a grade error, trace, job message or reward answer says the status
    and a fixed reason, never the server's body or reason phrase."""
    service = InternalService(status, body)
    try:
        settings.JUDGE_PRIVATE_HOSTS = [service.host_port]
        run = grade(
            judged_project, scalar, written_around_the_form(judged_project, service.base_url)
        )
        shown = everything_shown(run)
        assert service.requests and SECRET not in shown
        assert not Grade.objects.filter(run=run, error="").exists()
        assert (f"HTTP {status}" if status != 200 else "not a chat completion") in shown
        answer = reward(scalar)
        assert answer.status_code == 200 and SECRET not in answer.content.decode()
    finally:
        service.close()


class BannerService(socketserver.ThreadingTCPServer):
    """Not HTTP: a service that greets with a banner holding the secret, as SSH does."""

    daemon_threads = True

    def __init__(self) -> None:
        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.sendall(f"SSH-2.0-{SECRET}\r\n".encode())

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_non_http_answer_is_not_quoted_back() -> None:
    """A banner grab: the client's error names the failure, not the bytes it read (aiohttp
    quoted them in an exception that escaped the call)."""
    banner = BannerService()
    try:
        host, port = banner.server_address[:2]
        settings = JudgeSettings(f"http://{host}:{port}/v1", "m", None, max_retries=0)

        async def call() -> Any:
            async with JudgeClient(settings) as client:
                return await client.complete(ChatRequest(({"role": "user", "content": "hi"},)))

        result = asyncio.run(call())
        assert result.error is not None and SECRET not in result.error
        assert "not valid HTTP" in result.error
    finally:
        banner.shutdown()
        banner.server_close()


def test_a_malformed_egress_setting_stops_the_system_checks(settings: Any) -> None:
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    settings.JUDGE_PRIVATE_HOSTS = ["10.0.0.5"]  # no port: it would open every one
    with pytest.raises(SystemCheckError, match=r"JUDGE_PRIVATE_HOSTS: '10\.0\.0\.5' is not"):
        call_command("check")


def test_the_search_proposer_does_not_reach_the_internal_service(
    project: Project,
    internal: InternalService,
    fake_judge: FakeJudgeServer,
    tmp_path: Path,
) -> None:
    records: list[dict[str, Any]] = []
    for task, split in (("s0", "selection"), ("e0", "eval"), ("m0", "meta")):
        records.append({"type": "task", "id": task, "prompt": f"Deal {task}", "split": split})
        for n, truth in enumerate((0.9, 0.2)):
            records.append({"type": "response", "id": f"{task}/{n}", "task": task,
                            "content": f"answer {n}"})  # fmt: skip
            records.append({"type": "score", "response": f"{task}/{n}", "value": truth})
    jsonl_import(project=project, path=write_jsonl(tmp_path / "s.jsonl", records))
    fake_judge.responder = lambda body: json.dumps({"score": 0.5})
    judge = JudgeEndpoint.objects.create(
        project=project, name="judge", base_url=fake_judge.base_url, model="m"
    )
    port = internal.host_port.rsplit(":", 1)[1]
    proposer = written_around_the_form(project, f"http://localhost:{port}/v1")
    search = search_start(
        project=project, kind="scalar", mode="best_of_n", endpoint=judge, proposer=proposer, n=1
    )
    search_run_execute(search_id=search.pk)
    assert internal.requests == []
