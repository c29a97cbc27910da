"""Capture from inside a trainer: a sample of the groups a Grader scores, sent to the
workbench's bulk capture endpoint (graders/capture_api.py) so experts can label what the
policy now produces (DESIGN.md section 12).

    from graders.engine.runtime import CaptureTarget, load_bundle

    target = CaptureTarget("https://workbench.example/api/p/acme/capture",
                           token=os.environ["WORKBENCH_TOKEN"], run="grpo-7", rate=0.05)
    grader = load_bundle("bundle.json", capture=target)
    ...                          # each step: target.step = state.global_step
    target.close()               # at the end: sends what is queued, waits at most `timeout_s`

Training must never wait for the workbench, so `offer` only samples and enqueues: a bounded
queue (`queue_size` groups) feeds one background thread that posts batches of groups as JSON
Lines. When the queue is full (the workbench is slow or down) the group is dropped and
counted in `dropped`; a batch the workbench refuses or that cannot be sent is counted in
`failed` and logged, never retried (a rollout log is a sample; training goes on).

Where it may post follows the egress policy the judge client obeys (egress.py): the URL is
checked when the target is made, and its host's addresses before each send.

Also here, because the workbench names captured rows the same way: `capture_task_id` (a task
given by its content gets an id that is a hash of that content, so the same prompt always
lands on the same task) and `response_content_hash` (what "already captured" compares).
"""

import hashlib
import json
import logging
import queue
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from graders.engine.egress import EgressPolicy
from graders.engine.programs import ResponseInput, TaskInput

_log = logging.getLogger(__name__)

CAPTURE_CONTENT_TYPE = "application/x-ndjson"
TASK_ID_DIGITS = 32  # 128 bits of sha256: no two contents meet in a project's lifetime


def _digest(material: object) -> str:
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def capture_task_id(*, prompt: str, instructions: str, documents: Sequence[Sequence[str]]) -> str:
    """The id of a task known only by its content (prompt, instructions, documents as
    (id, title, text)): a hash of that content, so the same task always gets the same id and
    a different one never does."""
    material = {
        "prompt": prompt,
        "instructions": instructions,
        "documents": [list(document) for document in documents],
    }
    return _digest(material)[:TASK_ID_DIGITS]


def response_content_hash(content: str, messages: Sequence[Mapping[str, Any]] | None) -> str:
    """A response's identity for deduplication: its text, or its trajectory's messages."""
    return _digest({"content": content} if messages is None else {"messages": list(messages)})


@dataclass(frozen=True)
class _Group:
    task: TaskInput
    stored: bool
    responses: tuple[ResponseInput, ...]
    rewards: tuple[float | None, ...]
    step: int | None


_CLOSE = object()


class CaptureTarget:
    """Where a Grader sends a sample of its graded groups: the workbench's capture endpoint
    (`url`), with a project token holding the `capture` scope. `run` names the training run;
    set `step` as training goes (or pass it to `offer`). `rate` is the share of groups sent
    (whole groups, chosen at random; `seed` fixes the draw). Thread-safe; a pickled target
    (a trainer's spawned worker) starts its own thread and counters."""

    def __init__(
        self,
        url: str,
        *,
        token: str,
        run: str,
        rate: float = 1.0,
        queue_size: int = 256,
        batch_groups: int = 32,
        timeout_s: float = 10.0,
        egress: EgressPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        seed: int | None = None,
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be between 0 and 1, got {rate}")
        if queue_size < 1 or batch_groups < 1:
            raise ValueError("queue_size and batch_groups must be at least 1")
        if not run or len(run) > 200:
            raise ValueError("run must be 1 to 200 characters")
        if egress is not None:
            egress.check(url, None)  # EgressRefused before anything is queued
        self.url = url
        self.token = token
        self.run = run
        self.rate = rate
        self.queue_size = queue_size
        self.batch_groups = batch_groups
        self.timeout_s = timeout_s
        self.egress = egress
        self.transport = transport
        self.seed = seed
        self.step: int | None = None
        self._runtime_init()

    def _runtime_init(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.queue_size)
        self._rng = random.Random(self.seed)
        self._thread: threading.Thread | None = None
        self._outstanding = 0  # groups queued or being sent
        self._closed = False
        self.offered = 0
        self.dropped = 0
        self.sent = 0
        self.failed = 0

    def __getstate__(self) -> dict[str, Any]:
        keep = ("url", "token", "run", "rate", "queue_size", "batch_groups", "timeout_s")
        state = {name: self.__dict__[name] for name in keep}
        return state | {"egress": self.egress, "seed": self.seed, "step": self.step}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.transport = None
        self._runtime_init()

    def __repr__(self) -> str:
        return f"<CaptureTarget {self.url} run={self.run!r} rate={self.rate:g}>"

    def offer(
        self,
        task: TaskInput,
        responses: Sequence[ResponseInput],
        rewards: Sequence[float | None],
        *,
        stored: bool,
        step: int | None = None,
    ) -> bool:
        """Maybe send this graded group (`stored`: the task is one of the workbench's, by its
        id; otherwise it is sent with its content). Returns whether it was queued; never
        blocks and never raises for a full queue."""
        if self.rate < 1.0 and self._rng.random() >= self.rate:
            return False
        group = _Group(
            task, stored, tuple(responses), tuple(rewards), self.step if step is None else step
        )
        with self._lock:
            self.offered += 1
            if self._closed:
                self.dropped += 1
                return False
            try:
                self._queue.put_nowait(group)
            except queue.Full:
                self.dropped += 1
                return False
            self._outstanding += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="capture-sender", daemon=True
                )
                self._thread.start()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued group has been sent (or failed); False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (waiting at most `timeout`, default `timeout_s` times the
        batches queued, at least `timeout_s`) and stop the thread; later offers are dropped."""
        with self._lock:
            self._closed = True
            thread = self._thread
            batches = -(-self._outstanding // self.batch_groups)
        if thread is None:
            return
        wait = timeout if timeout is not None else self.timeout_s * max(1, batches)
        self.flush(wait)
        try:
            self._queue.put(_CLOSE, timeout=1.0)
        except queue.Full:
            return  # still sending past the deadline: the daemon thread dies with the process
        thread.join(timeout=wait)

    # The sending thread -----------------------------------------------------------------

    def _work(self) -> None:
        with httpx.Client(timeout=self.timeout_s, transport=self.transport) as client:
            while True:
                first = self._queue.get()
                if first is _CLOSE:
                    return
                batch: list[_Group] = [first]
                stop = False
                while len(batch) < self.batch_groups:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _CLOSE:
                        stop = True
                        break
                    batch.append(item)
                self._send(client, batch)
                with self._idle:
                    self._outstanding -= len(batch)
                    self._idle.notify_all()
                if stop:
                    return

    def _send(self, client: httpx.Client, batch: Sequence[_Group]) -> None:
        try:
            if self.egress is not None:
                self.egress.check_resolved(self.url, None)
            body = "".join(
                json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
                for number, group in enumerate(batch)
                for record in capture_records(group, self.run, number)
            )
            reply = client.post(
                self.url,
                content=body.encode(),
                headers={
                    "Authorization": f"Bearer {self.token}",
                    "Content-Type": CAPTURE_CONTENT_TYPE,
                },
            )
            if reply.status_code != 200:
                raise ValueError(f"HTTP {reply.status_code}: {reply.text[:300]}")
        except Exception as exc:  # a log sample lost; training must not notice
            with self._lock:
                self.failed += len(batch)
            _log.warning("capture: %d groups not sent to %s: %s", len(batch), self.url, exc)
            return
        with self._lock:
            self.sent += len(batch)


def capture_records(group: _Group, run: str, number: int) -> list[dict[str, Any]]:
    """A group as the bulk endpoint's JSON Lines: a task record when the workbench knows the
    task only by its content (its id the content hash), then one response record per
    response with the run, step, reward and `group` (its number in the batch, which keeps two
    groups of one task and step apart)."""
    task = group.task
    records: list[dict[str, Any]] = []
    if group.stored:
        task_id = task.id
    else:
        documents = [(d.id, d.title, d.text) for d in task.documents]
        task_id = capture_task_id(
            prompt=task.prompt, instructions=task.instructions, documents=documents
        )
        records.append(
            {
                "type": "task",
                "id": task_id,
                "prompt": task.prompt,
                "instructions": task.instructions,
                "documents": [
                    {"id": doc_id, "title": title, "text": text}
                    for doc_id, title, text in documents
                ],
            }
        )
    for position, (response, reward) in enumerate(zip(group.responses, group.rewards, strict=True)):
        record: dict[str, Any] = {
            "type": "response",
            "id": f"{number}.{position}",
            "task": task_id,
            "run": run,
            "group": str(number),
        }
        if response.messages is not None:
            record["messages"] = [dict(message) for message in response.messages]
        else:
            record["content"] = response.text
        if group.step is not None:
            record["step"] = group.step
        if reward is not None:
            record["reward"] = reward
        records.append(record)
    return records
