"""cells_run over real HTTP: JudgeClients against the scripted fake OpenAI server
(tests/fakes/synthesis_script.py), checked against what the script implies, and the filter
judges' prompts checked as the server received them."""

import asyncio
from collections.abc import Mapping

import pytest

from graders.engine.judge import Budget, BudgetExhausted, JudgeClient, JudgeSettings, MemoryCache
from graders.engine.programs import Judge
from graders.engine.synthesis.pipeline import cells_run
from graders.engine.synthesis.plan import CellPlan, cells_plan
from graders.engine.synthesis.rollout import ConversationRoller, Roller, SingleResponseRoller
from graders.engine.synthesis.types import LEVELS, DimensionSpec, SynthesisTask
from tests.fakes.openai_server import FakeJudgeServer
from tests.fakes.synthesis_script import SynthesisScript
from tests.graders.engine.synthesis.helpers import MemoryStore

SCRIPT = SynthesisScript()
JUDGES = tuple(SCRIPT.judge_errors)
DIMENSIONS = {
    name: DimensionSpec(name, f"How the agent does on {name}.")
    for name in ("friendliness", "clarity", "resolution")
}
TASKS = {
    f"air-{i}": SynthesisTask(
        f"air-{i}",
        "airline",
        f"I need to change booking {i}.",
        f"You are customer {i}; you want booking {i} moved a day later.",
        documents=(("Policy", "Changes are free within 24 hours."),),
        tool_names=("get_reservation", "update_reservation"),
    )
    for i in range(10)
}
SEED = 4


def _cells(tasks: int = 10) -> list[CellPlan]:
    return cells_plan(
        tasks=list(TASKS)[:tasks],
        dimensions=list(DIMENSIONS),
        agents=["agent"],
        seed=SEED,
        domains={task: "airline" for task in TASKS},
    )


def _clients(
    server: FakeJudgeServer, cache: MemoryCache, budget: Budget | None
) -> dict[str, JudgeClient]:
    return {
        model: JudgeClient(
            JudgeSettings(
                base_url=server.base_url, model=model, api_key_env=None, max_concurrency=4
            ),
            cache=cache,
            budget=budget,
        )
        for model in ("writer", "agent", "user", *JUDGES)
    }


def _run(
    server: FakeJudgeServer,
    cells: list[CellPlan],
    store: MemoryStore,
    cache: MemoryCache,
    *,
    budget: Budget | None = None,
    conversation: bool = False,
) -> None:
    async def main() -> None:
        clients = _clients(server, cache, budget)
        agents: Mapping[str, Judge] = {"agent": clients["agent"]}
        roller: Roller = (
            ConversationRoller(agents, clients["user"], turn_cap=4)
            if conversation
            else SingleResponseRoller(agents)
        )
        try:
            await cells_run(
                cells,
                tasks=TASKS,
                dimensions=DIMENSIONS,
                writer=clients["writer"],
                judges=[(name, clients[name]) for name in JUDGES],
                roller=roller,
                store=store,
                retries=2,
                seed=SEED,
            )
        finally:
            for client in clients.values():
                await client.aclose()

    asyncio.run(main())


def _models(server: FakeJudgeServer) -> list[str]:
    return [request.body["model"] for request in server.requests]


def test_thirty_cells_end_as_the_script_implies_and_a_rerun_calls_nothing(
    fake_judge: FakeJudgeServer,
) -> None:
    fake_judge.responder = SCRIPT.respond
    cells = _cells()
    store, cache = MemoryStore(), MemoryCache()
    _run(fake_judge, cells, store, cache)
    implied = SCRIPT.implied(
        cells, tasks=TASKS, dimensions=DIMENSIONS, judges=JUDGES, retries=2, seed=SEED
    )
    assert store.kept_at() == {key: r for key, r in implied.kept_at.items() if r is not None}
    assert 0 < implied.kept < len(cells) and any(
        r for r in implied.kept_at.values()
    )  # a retry path
    models = _models(fake_judge)
    assert models.count("writer") == implied.writer
    assert models.count("agent") == implied.agent
    assert sum(models.count(judge) for judge in JUDGES) == implied.judges
    assert not store.failures
    # Everything is stored: running again asks nothing, not even the cache.
    before = fake_judge.call_count
    _run(fake_judge, cells, store, MemoryCache())
    assert fake_judge.call_count == before


def test_filter_judges_see_no_level_steering_or_vote(fake_judge: FakeJudgeServer) -> None:
    fake_judge.responder = SCRIPT.respond
    store = MemoryStore()
    _run(fake_judge, _cells(4), store, MemoryCache())
    secrets = [
        text for steering in store.steerings.values() for text in steering.as_dict().values()
    ]
    filter_bodies = [r.body for r in fake_judge.requests if r.body["model"] in JUDGES]
    assert filter_bodies
    for body in filter_bodies:
        text = "\n".join(message["content"] for message in body["messages"])
        assert not any(secret in text for secret in secrets)
        assert "level=" not in text and "<behaviour>" not in text
        assert not any(f'"{level}"' in text for level in LEVELS)
        assert '"answer"' in text and "agrees" not in text and "judge1" not in text
    # ... while the agent did get its steering (the check above is not vacuous).
    agent_text = [
        r.body["messages"][0]["content"] for r in fake_judge.requests if r.body["model"] == "agent"
    ]
    assert all("<behaviour>" in text and "level=" in text for text in agent_text)


def test_a_budget_stop_then_resume_pays_for_nothing_twice(fake_judge: FakeJudgeServer) -> None:
    fake_judge.responder = SCRIPT.respond
    cells = _cells()
    store, cache = MemoryStore(), MemoryCache()
    with pytest.raises(BudgetExhausted, match="call budget of 40 spent"):
        _run(fake_judge, cells, store, cache, budget=Budget(max_calls=40))
    stopped_at = fake_judge.call_count
    assert stopped_at == 40 and store.events  # stopped part-way, with work stored
    _run(fake_judge, cells, store, cache)
    implied = SCRIPT.implied(
        cells, tasks=TASKS, dimensions=DIMENSIONS, judges=JUDGES, retries=2, seed=SEED
    )
    assert fake_judge.call_count == implied.writer + implied.agent + implied.judges
    assert store.kept_at() == {key: r for key, r in implied.kept_at.items() if r is not None}


def test_conversation_rollouts_are_trajectories_the_judges_read_as_turns(
    fake_judge: FakeJudgeServer,
) -> None:
    fake_judge.responder = SCRIPT.respond
    cells = _cells(2)
    store = MemoryStore()
    _run(fake_judge, cells, store, MemoryCache(), conversation=True)
    rollout = next(iter(store.rollouts.values()))
    assert [m["role"] for m in rollout.messages or []] == ["user", "assistant", "user"]
    assert rollout.calls == 3  # the user opens, the agent answers, the user stops
    implied = SCRIPT.implied(
        cells, tasks=TASKS, dimensions=DIMENSIONS, judges=JUDGES, retries=2, seed=SEED
    )
    models = _models(fake_judge)
    # Per draw: one opening (the simulator never sees the steering, so both levels' openings
    # are one request, sent once) and one closing per level.
    draws = implied.agent // 2
    assert (models.count("agent"), models.count("user")) == (implied.agent, 3 * draws)
    filter_text = next(
        r.body["messages"][-1]["content"]
        for r in fake_judge.requests
        if r.body["model"] == "judge1"
    )
    assert "[Turn 1] user" in filter_text and "[Turn 2] assistant" in filter_text
    assert store.kept_at() == {key: r for key, r in implied.kept_at.items() if r is not None}
