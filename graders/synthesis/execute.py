"""Running a synthesis run (DESIGN.md section 11) as one resumable job: the engine's pipeline
(graders.engine.synthesis.pipeline.cells_run) over the run's unfinished cells, with the
labeling rows as its store (graders.synthesis.store).

One worker runs a run at a time, under a lease it keeps fresh (labeling.jobs.job_run_leased);
a redelivery or a worker started after a crash takes the lease once it is stale and goes on
from the rows: a finished cell is not passed again, and within a cell nothing stored (steering,
a rollout, a vote, a draw's end) is asked again. Judge calls cut short by the crash are made
again; deterministic ones that were answered come from the judge cache.

Every endpoint gets one judge client, so its own max_concurrency bounds the calls in flight to
it whatever stage they are for; all of them share the run's budget. The engine's event loop
reaches the database through one bridge (DatabaseJudgeCache.run/call) that every endpoint's
cache and the store go through."""

import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

from graders.engine.judge import Budget, BudgetExhausted, CallsStopped, JudgeClient, Usage
from graders.engine.synthesis.pipeline import cells_run
from graders.engine.synthesis.plan import CellPlan
from graders.engine.synthesis.rollout import Roller
from graders.engine.synthesis.types import DimensionSpec, SynthesisTask
from graders.grading import run_budget
from graders.judge_cache import DatabaseJudgeCache
from graders.models import JudgeEndpoint, RolloutMode, SynthesisRun
from graders.services import endpoint_settings
from graders.synthesis.progress import cells_counts, eta_text
from graders.synthesis.store import RowCellStore
from labeling.jobs import (
    BudgetSpent,
    JobCancelled,
    JobHeartbeat,
    LeaseLost,
    budget_spent_text,
    job_cancel_requested,
    job_resend,
    job_run_leased,
)
from labeling.models import DrawOutcome, Job, Task

PROGRESS_EVERY_S = 1.0


class BridgedCache(DatabaseJudgeCache):
    """An endpoint's judge cache whose database calls go through another cache's bridge, so
    the clients of every endpoint of one run share one event loop and one database thread."""

    def __init__(self, endpoint: JudgeEndpoint, bridge: DatabaseJudgeCache) -> None:
        super().__init__(endpoint)
        self._requests = bridge._requests


class WatchedBudget(Budget):
    """The run's budget, remembering that it ran out so the store stops writing at once."""

    spent = False

    def claim(self) -> None:
        try:
            super().claim()
        except Exception:
            self.spent = True
            raise


def synthesis_run_execute(*, run_id: int) -> dict[str, Any]:
    """Run or resume a synthesis run; safe to call any number of times."""
    run = SynthesisRun.objects.select_related(
        "job", "project", "synthesis", "writer", "user_simulator"
    ).get(pk=run_id)

    outcome = job_run_leased(
        job_id=run.job_id,
        work=lambda job, heartbeat: SynthesisPass(run, job, heartbeat).execute(),
        resend=job_resend("graders.tasks.synthesis_run_task", run_id),
        cancelled="Cancelled; the cells, rollouts and votes so far are kept. Resume to go on.",
    )
    return {"run": run_id, **outcome}


def _task(task: Task) -> SynthesisTask:
    tools = task.metadata.get("tools") if isinstance(task.metadata, dict) else None
    names = tuple(
        str(t.get("name") if isinstance(t, dict) else t)
        for t in (tools if isinstance(tools, list) else [])
    )
    return SynthesisTask(
        id=task.external_id,
        domain=task.domain,
        prompt=task.prompt,
        instructions=task.instructions,
        documents=tuple((d.title or d.external_id, d.text) for d in task.documents.all()),
        tool_names=names,
    )


class SynthesisPass:
    """One worker's pass over a run, from wherever its rows say it is."""

    def __init__(self, run: SynthesisRun, job: Job, heartbeat: JobHeartbeat) -> None:
        self.run, self.job, self.heartbeat = run, job, heartbeat
        self.started = time.monotonic()
        self.usage_before: dict[str, Any] = dict(run.usage)
        self.budget = WatchedBudget(**vars(run_budget(run.max_calls, run.max_cost, run.usage)))
        self.clients: list[JudgeClient] = []
        self.judges: list[JudgeEndpoint] = []
        self.agents: list[JudgeEndpoint] = []
        self.extra_usage = Usage()  # what rollers outside the judge clients spent
        self.waiting: set[str] = set()  # cells a harness roller deferred: they owe rollouts
        self.shown_at = -1.0
        self.cancelled = False
        self.done_before: int | None = None

    # Stopping and progress, on the database thread ----------------------------------------

    def stopped(self) -> bool:
        """Whether to stop sending calls and writing results: a cancel, a lost lease, or the
        budget spent."""
        if not self.cancelled and job_cancel_requested(job=self.job):
            self.cancelled = True
        return self.cancelled or self.heartbeat.lost or self.budget.spent

    def usage(self) -> dict[str, Any]:
        totals: dict[str, Any] = dict(self.usage_before)
        for usage in [*(c.usage for c in self.clients), self.extra_usage]:
            for key, value in usage.as_dict().items():
                totals[key] = totals.get(key, 0) + value
        return totals

    def progress(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.shown_at < PROGRESS_EVERY_S:
            return
        self.shown_at = now
        counts = cells_counts(self.run)
        if self.done_before is None:
            self.done_before = counts.done
        eta = eta_text(
            done=counts.done - self.done_before,
            left=counts.total - counts.done,
            seconds=now - self.started,
        )
        stage = (
            f"Cells: {counts.done} of {counts.total} finished · {counts.kept} kept, "
            f"{counts.failed} failed{eta}"
        )
        usage = self.usage()
        SynthesisRun.objects.filter(pk=self.run.pk).update(usage=usage)
        Job.objects.filter(pk=self.job.pk).update(
            stage=stage[:100],
            done=counts.done,
            total=counts.total,
            cost=round(float(usage.get("cost", 0.0)), 6),
        )

    # The pass ---------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        run = self.run
        bridge = DatabaseJudgeCache(run.writer)
        store = RowCellStore(run, bridge, changed=self.progress, stopped=self.stopped)
        finished = self._finished(store)
        plans = [
            CellPlan(
                key=c.external_id,
                task_id=c.task.external_id,
                dimension=c.dimension.name,
                low=c.low_level,  # type: ignore[arg-type]
                high=c.high_level,  # type: ignore[arg-type]
                agent=c.agent,
            )
            for c in store.cells.values()
            if c.external_id not in finished
        ]
        self.progress(force=True)
        task_rows = Task.objects.filter(pk__in={c.task_id for c in store.cells.values()})
        tasks = {t.external_id: _task(t) for t in task_rows.prefetch_related("documents")}
        dimensions = {d.name: DimensionSpec(d.name, d.description) for d in run.dimensions.all()}
        # Read here: the coroutine below runs where the ORM may not.
        self.judges = [j.endpoint for j in run.cascade.select_related("endpoint")]
        self.agents = list(run.agents.all())
        if plans:
            try:
                bridge.run(self._cells_run(bridge, store, plans, tasks, dimensions))
            except (BudgetExhausted, CallsStopped):
                # Every cell stored what it had in flight; the flags below say which stop.
                if not (self.heartbeat.lost or self.cancelled or self.budget.spent):
                    raise

        self.progress(force=True)
        if self.heartbeat.lost:
            raise LeaseLost
        if self.cancelled:
            raise JobCancelled
        if self.budget.spent:
            raise BudgetSpent(budget_spent_text(self.usage()))
        counts = cells_counts(run)
        if self.waiting:
            Job.objects.filter(pk=self.job.pk).update(
                stage=f"Waiting for the harness: {len(self.waiting)} cells owe rollouts"
            )
        return {
            "cells": counts.total,
            "kept": counts.kept,
            "failed": counts.failed,
            "waiting": counts.total - counts.done,
        }

    def _finished(self, store: RowCellStore) -> set[str]:
        """The cells with nothing left to do: failed, kept, or vetoed on their last retry."""
        done = {key for key, cell in store.cells.items() if cell.error}
        for (key, retry), draw in store.draws.items():
            if draw.outcome == DrawOutcome.KEPT or (
                retry >= self.run.retries and draw.outcome != DrawOutcome.PENDING
            ):
                done.add(key)
        return done

    async def _cells_run(
        self,
        bridge: DatabaseJudgeCache,
        store: RowCellStore,
        plans: list[CellPlan],
        tasks: dict[str, SynthesisTask],
        dimensions: dict[str, DimensionSpec],
    ) -> None:
        run = self.run
        judges, agents = self.judges, self.agents
        endpoints = {e.pk: e for e in [run.writer, *judges, *agents]}
        if run.user_simulator is not None:
            endpoints[run.user_simulator.pk] = run.user_simulator
        stop: Callable[[], bool] = lambda: bool(bridge.call(self.stopped))  # noqa: E731
        async with AsyncExitStack() as stack:
            clients: dict[int, JudgeClient] = {}
            for pk, endpoint in endpoints.items():
                cache = bridge if pk == run.writer_id else BridgedCache(endpoint, bridge)
                client = JudgeClient(
                    endpoint_settings(endpoint), cache=cache, budget=self.budget, stop=stop
                )
                clients[pk] = await stack.enter_async_context(client)
                self.clients.append(client)
            roller = await self._roller(stack, clients, agents, store)
            await cells_run(
                plans,
                tasks=tasks,
                dimensions=dimensions,
                writer=clients[run.writer_id],
                judges=[(j.name, clients[j.pk]) for j in judges],
                roller=roller,
                store=store,
                retries=run.retries,
                seed=run.seed,
            )

    async def _roller(
        self,
        stack: AsyncExitStack,
        clients: dict[int, JudgeClient],
        agents: list[JudgeEndpoint],
        store: RowCellStore,
    ) -> Roller:
        from graders.engine.synthesis.rollout import ConversationRoller, SingleResponseRoller
        from graders.synthesis.rollers import HarnessRoller
        from graders.synthesis.webhook import WebhookRoller

        run = self.run
        by_name = {a.name: clients[a.pk] for a in agents}
        if run.mode == RolloutMode.SINGLE:
            return SingleResponseRoller(by_name)
        if run.mode == RolloutMode.CONVERSATION:
            assert run.user_simulator_id is not None
            return ConversationRoller(by_name, clients[run.user_simulator_id], run.turn_cap)
        if run.mode == RolloutMode.WEBHOOK:
            webhook = WebhookRoller(run, store, usage=self.extra_usage, budget=self.budget)
            return await stack.enter_async_context(webhook)
        harness = HarnessRoller(run, store)
        self.waiting = harness.waiting
        return harness
