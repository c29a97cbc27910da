"""Rollouts by a webhook: each steering job is POSTed as JSON to the run's rollout webhook URL,
which answers with the trajectory.

The URL is an admin's, the call leaves from the operator's workers: it goes through the same
egress policy as a judge call (graders/judge_egress.py; private addresses only where the
operator allows that host:port), checked when the run is made and again on every connection,
with no key or other secret in the request. Each job has a timeout, a bounded number of
retries on network failures, 429 and 5xx, and a size limit on the answer; a job that still
fails becomes its draw's error (RolloutFailed), saying what went wrong, never quoting the
remote body.

The request body:
    {"synthesis": ID, "cell": KEY, "level": "bad"|"ok"|"good", "attempt": N, "agent": NAME,
     "system_addition": TEXT, "seed": N,
     "task": {"id", "domain", "prompt", "instructions", "documents": [{"title", "text"}],
              "tool_names": [...]}}
The answer: {"content": TEXT} or {"messages": [...]} (FORMATS.md response messages), and
optionally "cost" (dollars, a number >= 0)."""

import asyncio
import json
import random
from types import TracebackType
from typing import Any, Self

import aiohttp
from pydantic import ValidationError

from graders.engine.egress import EgressPolicy, EgressRefused
from graders.engine.judge import Budget, Usage
from graders.engine.judge_http import EgressResolver, ssl_context
from graders.engine.synthesis.rollout import RolloutFailed
from graders.engine.synthesis.types import Rollout, SynthesisTask
from graders.judge_egress import egress_policy
from graders.models import SynthesisRun
from graders.synthesis.rollers import RolloutJob, RolloutJobs
from graders.synthesis.store import RowCellStore
from labeling.json_input import json_parse
from labeling.records import MAX_MESSAGES, MAX_RESPONSE_TEXT, Message

WEBHOOK_TIMEOUT_S = 300.0
WEBHOOK_CONNECT_TIMEOUT_S = 10.0
WEBHOOK_RETRIES = 2
WEBHOOK_MAX_BYTES = 8 * 1024 * 1024
WEBHOOK_CONCURRENCY = 16
_BACKOFF_S = 1.0


def webhook_url_check(url: str) -> str | None:
    """Why the egress policy refuses this webhook URL (its addresses looked up now), or None."""
    try:
        egress_policy().check_resolved(url, None)
    except EgressRefused as exc:
        return f"rollout webhook: {exc}"
    return None


class _Retryable(Exception):
    pass


class WebhookRoller:
    """See the module docstring. Use as an async context manager (its connections)."""

    def __init__(
        self,
        run: SynthesisRun,
        store: RowCellStore,
        *,
        usage: Usage,
        budget: Budget | None = None,
        policy: EgressPolicy | None = None,
        timeout_s: float = WEBHOOK_TIMEOUT_S,
        retries: int = WEBHOOK_RETRIES,
        max_bytes: int = WEBHOOK_MAX_BYTES,
        backoff_s: float = _BACKOFF_S,
    ) -> None:
        self.run, self.url = run, run.webhook_url
        self.jobs = RolloutJobs(run, store)
        # The webhook's calls are the user's harness, not judge calls: they count in the
        # run's usage, and the dollars it reports in the run's dollar budget.
        self.usage, self.budget = usage, budget
        self.policy = policy or egress_policy()
        self.timeout_s, self.retries, self.max_bytes = timeout_s, retries, max_bytes
        self.backoff_s = backoff_s
        self._session: aiohttp.ClientSession | None = None
        self._semaphore = asyncio.Semaphore(WEBHOOK_CONCURRENCY)

    async def __aenter__(self) -> Self:
        self.policy.check(self.url, None)
        connector = aiohttp.TCPConnector(
            limit=WEBHOOK_CONCURRENCY, ssl=ssl_context(), resolver=EgressResolver(self.policy)
        )
        self._session = aiohttp.ClientSession(connector=connector)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()

    async def roll(
        self, task: SynthesisTask, system_addition: str, *, agent: str, seed: int
    ) -> Rollout:
        job = self.jobs.resolve(task, system_addition, agent, seed)
        try:
            async with self._semaphore:
                return await self._post(job, task, seed)
        finally:
            self.jobs.release(job)

    def _body(self, job: RolloutJob, task: SynthesisTask, seed: int) -> bytes:
        payload = {
            "synthesis": self.run.synthesis.external_id,
            **job.as_json(),
            "seed": seed,
            "task": {
                "id": task.id,
                "domain": task.domain,
                "prompt": task.prompt,
                "instructions": task.instructions,
                "documents": [{"title": t, "text": x} for t, x in task.documents],
                "tool_names": list(task.tool_names),
            },
        }
        return json.dumps(payload, ensure_ascii=False).encode()

    async def _post(self, job: RolloutJob, task: SynthesisTask, seed: int) -> Rollout:
        assert self._session is not None, "use the roller as an async context manager"
        body = self._body(job, task, seed)
        name = f"rollout webhook, job {job.cell} {job.level} attempt {job.attempt}"
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(random.uniform(0, self.backoff_s * 2 ** (attempt - 1)))
            self.usage.calls += 1
            try:
                rollout = await self._post_once(body)
            except _Retryable as exc:
                problem = str(exc)
                self.usage.retries += attempt < self.retries
            except RolloutFailed as exc:
                self.usage.failures += 1
                raise RolloutFailed(f"{name}: {exc}") from None
            else:
                self.usage.cost += rollout.cost
                if self.budget is not None:
                    self.budget.spend(rollout.cost)
                return rollout
        self.usage.failures += 1
        raise RolloutFailed(f"{name}: gave up after {self.retries + 1} attempts; last: {problem}")

    async def _post_once(self, body: bytes) -> Rollout:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(
            total=self.timeout_s, sock_connect=WEBHOOK_CONNECT_TIMEOUT_S
        )
        try:
            async with self._session.post(
                self.url,
                data=body,
                headers={"Content-Type": "application/json"},
                allow_redirects=False,
                timeout=timeout,
            ) as response:
                if response.status in (429, 500, 502, 503, 504):
                    raise _Retryable(f"HTTP {response.status}")
                if response.status != 200:
                    raise RolloutFailed(f"HTTP {response.status}")
                content = await response.content.read(self.max_bytes + 1)
        except EgressRefused as exc:
            raise RolloutFailed(str(exc)) from None
        except TimeoutError:
            raise _Retryable(f"no answer within {self.timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise _Retryable(f"network error ({type(exc).__name__})") from None
        if len(content) > self.max_bytes:
            raise RolloutFailed(f"the answer is over the limit of {self.max_bytes} bytes")
        return trajectory_parse(content)


def trajectory_parse(content: bytes | str) -> Rollout:
    """A returned or imported trajectory as a Rollout; RolloutFailed naming the field at fault."""
    try:
        answer = json_parse(content)
    except ValueError as exc:
        raise RolloutFailed(f"the answer is not JSON ({exc})") from None
    if not isinstance(answer, dict):
        raise RolloutFailed("the answer is not a JSON object")
    return trajectory_from(answer)


def trajectory_from(answer: dict[str, Any]) -> Rollout:
    """{"content": TEXT} or {"messages": [...]}, optionally "cost", as a Rollout."""
    content, messages = answer.get("content"), answer.get("messages")
    if (content is None) == (messages is None):
        raise RolloutFailed("content: give exactly one of 'content' (text) or 'messages'")
    if content is not None and (not isinstance(content, str) or len(content) > MAX_RESPONSE_TEXT):
        raise RolloutFailed(f"content: text of at most {MAX_RESPONSE_TEXT} characters")
    checked = None
    if messages is not None:
        if not isinstance(messages, list) or not 1 <= len(messages) <= MAX_MESSAGES:
            raise RolloutFailed(f"messages: a list of 1 to {MAX_MESSAGES} messages")
        checked = []
        for index, message in enumerate(messages):
            try:
                checked.append(Message.model_validate(message).model_dump(exclude_none=True))
            except ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(p) for p in (index, *error["loc"]))
                raise RolloutFailed(f"messages.{where}: {error['msg']}") from None
    cost = answer.get("cost", 0.0)
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < 1e6:
        raise RolloutFailed("cost: a number of dollars, 0 or more")
    return Rollout(content=content, messages=checked, cost=float(cost), calls=1)
