"""The runtime's capture target (graders/engine/capture_client.py): a bounded background queue
that drops rather than blocks, what it sends, the egress policy, pickling, and a Grader that
offers every graded group. No Django; the workbench is an httpx.MockTransport here (the
endpoint's side is tests/graders/test_capture_bulk.py)."""

import json
import pickle
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from graders.engine.capture_client import CaptureTarget, capture_task_id
from graders.engine.egress import EgressPolicy, EgressRefused
from graders.engine.programs import DocumentInput, ResponseInput, TaskInput
from graders.engine.runtime import load_bundle
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.engine.test_runtime import SCALAR, bundle_dict, quality_judge
from tests.graders.engine.test_trainer_docs import block, run

URL = "https://workbench.example/api/p/acme/capture"
TASK = TaskInput("t0", "Review contract 0")
RESPONSES = [ResponseInput("0", "good answer"), ResponseInput("1", "poor answer")]


class Workbench:
    """Records each posted log; `gate`, when set, holds every request until it is opened."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.bodies: list[list[dict[str, Any]]] = []
        self.headers: list[httpx.Headers] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(timeout=30)
        self.headers.append(request.headers)
        self.bodies.append([json.loads(line) for line in request.content.decode().splitlines()])
        return httpx.Response(self.status, json={})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


@pytest.fixture
def targets() -> Iterator[Callable[..., CaptureTarget]]:
    made: list[CaptureTarget] = []

    def make(workbench: Workbench, **options: Any) -> CaptureTarget:
        options.setdefault("run", "grpo-7")
        target = CaptureTarget(URL, token="wbt_x", transport=workbench.transport(), **options)
        made.append(target)
        return target

    yield make
    for target in made:
        target.close(timeout=5)


def test_a_full_queue_drops_and_counts_instead_of_blocking(
    targets: Callable[..., CaptureTarget],
) -> None:
    workbench = Workbench()
    workbench.gate = threading.Event()
    target = targets(workbench, queue_size=2, batch_groups=1)
    assert target.offer(TASK, RESPONSES, [0.9, 0.1], stored=True)
    assert workbench.entered.wait(timeout=10)  # the sender holds group 1, stuck in its POST
    # While the workbench does not answer, every offer returns at once (this test would
    # hang here otherwise): two fit in the queue, the other seven are dropped.
    queued = [target.offer(TASK, RESPONSES, [0.9, 0.1], stored=True) for _ in range(9)]
    assert queued == [True, True] + [False] * 7
    assert (target.offered, target.dropped) == (10, 7)
    workbench.gate.set()
    assert target.flush(timeout=10)
    assert (target.sent, target.failed) == (3, 0)


def test_groups_are_sent_as_capture_log_lines(targets: Callable[..., CaptureTarget]) -> None:
    workbench = Workbench()
    target = targets(workbench)
    inline = TaskInput(
        "prompt:1f", "Summarise deal 9", "Be brief", (DocumentInput("spa", "SPA", "Clause 9."),)
    )
    trajectory = ResponseInput("0", "", ({"role": "assistant", "content": "hi"},))
    target.step = 4
    target.offer(TASK, RESPONSES, [0.9, None], stored=True)
    target.offer(inline, [trajectory], [0.5], stored=False, step=5)
    target.close(timeout=10)
    # A batch numbers its groups ("group") and their lines ("id"), so how the sender batched
    # them (one POST or two) changes those and nothing else.
    lines = [
        {k: v for k, v in line.items() if k != "group" and (k != "id" or line["type"] == "task")}
        for body in workbench.bodies
        for line in body
    ]
    task_id = capture_task_id(
        prompt="Summarise deal 9", instructions="Be brief", documents=[("spa", "SPA", "Clause 9.")]
    )
    assert lines == [
        {"type": "response", "task": "t0", "run": "grpo-7", "content": "good answer", "step": 4,
         "reward": 0.9},
        {"type": "response", "task": "t0", "run": "grpo-7", "content": "poor answer", "step": 4},
        {"type": "task", "id": task_id, "prompt": "Summarise deal 9", "instructions": "Be brief",
         "documents": [{"id": "spa", "title": "SPA", "text": "Clause 9."}]},
        {"type": "response", "task": task_id, "run": "grpo-7",
         "messages": [{"role": "assistant", "content": "hi"}], "step": 5, "reward": 0.5},
    ]  # fmt: skip
    first = workbench.bodies[0][:2]
    assert [(line["id"], line["group"]) for line in first] == [("0.0", "0"), ("0.1", "0")]
    assert workbench.headers[0]["authorization"] == "Bearer wbt_x"
    assert workbench.headers[0]["content-type"] == "application/x-ndjson"


def test_the_rate_samples_whole_groups(targets: Callable[..., CaptureTarget]) -> None:
    workbench = Workbench()
    target = targets(workbench, rate=0.1, seed=1, queue_size=1000)
    queued = sum(target.offer(TASK, RESPONSES, [0.9, 0.1], stored=True) for _ in range(2000))
    target.close(timeout=30)
    # Binomial(2000, 0.1): mean 200, standard deviation 13.4; the bound is 3.7 of them.
    assert 150 <= queued <= 250
    sent = [line for body in workbench.bodies for line in body]
    assert len(sent) == 2 * queued  # both responses of every group sent, never one
    assert target.sent == queued


def test_a_refusing_workbench_is_counted_and_logged_not_raised(
    targets: Callable[..., CaptureTarget], caplog: pytest.LogCaptureFixture
) -> None:
    target = targets(Workbench(status=403))
    target.offer(TASK, RESPONSES, [0.9, 0.1], stored=True)
    assert target.flush(timeout=10)
    assert (target.sent, target.failed) == (0, 1)
    assert "HTTP 403" in caplog.text


def test_offers_after_close_are_dropped(targets: Callable[..., CaptureTarget]) -> None:
    target = targets(Workbench())
    target.offer(TASK, RESPONSES, [0.9, 0.1], stored=True)
    target.close(timeout=10)
    assert not target.offer(TASK, RESPONSES, [0.9, 0.1], stored=True)
    assert (target.sent, target.dropped) == (1, 1)


def test_the_egress_policy_is_obeyed() -> None:
    policy = EgressPolicy()
    with pytest.raises(EgressRefused, match="loopback"):
        CaptureTarget("http://127.0.0.1:8000/api/p/acme/capture", token="t", run="r", egress=policy)
    allowed = EgressPolicy.parse(private_hosts=["127.0.0.1:8000"])
    target = CaptureTarget(
        "http://127.0.0.1:8000/api/p/acme/capture", token="t", run="r", egress=allowed
    )
    assert target.egress is allowed


def test_bad_settings_are_refused() -> None:
    for options, problem in (
        ({"rate": 1.5}, "rate"),
        ({"queue_size": 0}, "queue_size"),
        ({"run": ""}, "run"),
    ):
        with pytest.raises(ValueError, match=problem):
            CaptureTarget(URL, token="t", **({"run": "r"} | options))


def test_a_pickled_target_starts_afresh(targets: Callable[..., CaptureTarget]) -> None:
    target = targets(Workbench(), rate=0.5, seed=3)
    target.step = 9
    target.offer(TASK, RESPONSES, [0.9, 0.1], stored=True)
    copy = pickle.loads(pickle.dumps(target))
    assert (copy.url, copy.run, copy.rate, copy.step) == (URL, "grpo-7", 0.5, 9)
    assert (copy.offered, copy.sent, copy.transport) == (0, 0, None)


def test_a_grader_offers_each_graded_group(
    fake_judge: FakeJudgeServer, targets: Callable[..., CaptureTarget]
) -> None:
    fake_judge.responder = quality_judge
    workbench = Workbench()
    target = targets(workbench)
    bundle = bundle_dict(SCALAR, fake_judge.base_url, tasks={"t0": {"prompt": "Review contract 0"}})
    grader = load_bundle(bundle, capture=target)
    try:
        known = grader.score_group_sync("t0", RESPONSES)
        task = grader.resolve_task(prompt="Summarise deal 9")
        grader.score_group_sync(task, [ResponseInput("0", "fair answer")])
    finally:
        grader.close()
    target.close(timeout=10)
    lines = [line for body in workbench.bodies for line in body]
    responses = [line for line in lines if line["type"] == "response"]
    assert [line.get("reward") for line in responses[:2]] == [r.reward for r in known]
    assert responses[0]["task"] == "t0"  # a bundle task goes by its id
    inline_id = capture_task_id(prompt="Summarise deal 9", instructions="", documents=[])
    assert (
        responses[2]["task"] == inline_id
        and {"type": "task", "id": inline_id}.items() <= lines[2].items()
    )


def test_the_trainers_guide_example_wires_a_target_into_the_grader(
    fake_judge: FakeJudgeServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "grader-bundle.json").write_text(
        json.dumps(bundle_dict(SCALAR, fake_judge.base_url))
    )
    monkeypatch.chdir(tmp_path)
    namespace = run(block("CaptureTarget("), tmp_path)
    namespace["grader"].close()
    assert namespace["grader"].capture is namespace["capture"]
    assert (namespace["capture"].run, namespace["capture"].rate) == ("grpo-7", 0.05)
    assert capsys.readouterr().out.splitlines() == ["0 0 0"]
