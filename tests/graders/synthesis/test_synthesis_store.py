"""RowCellStore's rollouts: a draw's first rollout is held on the draw until its pair comes
back, then both Responses are created together in the order of their hashed ids, so response
primary keys (the grading page posts to grade/<response pk>/) follow neither the levels nor
which rollout finished first."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from graders.engine.synthesis.types import Rollout
from graders.models import SynthesisRun
from graders.synthesis.execute import synthesis_run_execute
from graders.synthesis.rollers import open_jobs
from graders.synthesis.runs import synthesis_start
from graders.synthesis.store import RowCellStore, rollout_response_id
from labeling.models import Annotator, Preference, Project, Provider, Response, SynthesisDraw
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis.scripted import Script, start_arguments, synthesis_project


@pytest.fixture
def steered(project: Project, fake_judge: FakeJudgeServer) -> SynthesisRun:
    """A harness run after its first pass: every cell steered, no rollout yet."""
    fake_judge.responder = Script()
    synthesis_project(project, fake_judge, ("t1", "t2", "t3", "t4"))
    run = synthesis_start(**start_arguments(project, mode="harness"))
    synthesis_run_execute(run_id=run.pk)
    return run


def _store(run: SynthesisRun) -> RowCellStore:
    return RowCellStore(run, None, changed=lambda: None, stopped=lambda: False)


def test_a_draws_responses_are_created_together_in_hashed_id_order(
    steered: SynthesisRun,
) -> None:
    store = _store(steered)
    cells = sorted(store.cells.values(), key=lambda c: c.external_id)
    assert len(cells) == 8
    for number, cell in enumerate(cells):
        # Half the draws see their higher level back first, half their lower.
        first, second = (cell.high_level, cell.low_level)[:: 1 if number % 2 else -1]
        store.rollout_save(cell.external_id, 0, first, Rollout(f"{first} text", None, calls=1))
        # Held on the draw, no Response yet; a fresh store (a resume) holds it too and owes
        # only the other level.
        draw = SynthesisDraw.objects.get(cell=cell, retry=0)
        assert list(draw.held) == [first] and draw.low_response_id is None
        prefix = f"{steered.synthesis.external_id}/{cell.external_id}/"
        assert not Response.objects.filter(external_id__startswith=prefix).exists()
        resumed = _store(steered)
        assert resumed.rollout_held(cell.external_id, 0, first) == Rollout(
            f"{first} text", None, calls=1
        )
        owed = [j.level for j in open_jobs(steered, resumed) if j.cell == cell.external_id]
        assert owed == [second]
        resumed.rollout_save(cell.external_id, 0, second, Rollout(f"{second} text", None))
        # Saving the first again (a second delivery) changes nothing.
        resumed.rollout_save(cell.external_id, 0, first, Rollout("other", None))
        draw.refresh_from_db()
        assert draw.held == {}
        assert (draw.low_response.content, draw.high_response.content) == (
            f"{cell.low_level} text",
            f"{cell.high_level} text",
        )
        # A harness run's rollouts report no tokens: unknown, left out, not 0.
        assert draw.usage == {"rollout": {"calls": 1}, "steer": draw.usage["steer"]}
        ids = {
            level: rollout_response_id(steered, cell.external_id, 0, level)
            for level in (cell.low_level, cell.high_level)
        }
        by_pk = sorted([draw.low_response, draw.high_response], key=lambda r: r.pk)
        assert [r.external_id for r in by_pk] == sorted(ids.values())
        assert by_pk[1].pk == by_pk[0].pk + 1  # created together
        store = resumed
    # The pk order is not the level order: in this run the higher level comes first in some
    # draws and second in others.
    lower_first = {
        d.low_response_id < d.high_response_id
        for d in SynthesisDraw.objects.filter(cell__synthesis=steered.synthesis)
    }
    assert lower_first == {True, False}


def test_a_store_looks_its_annotator_up_once_for_every_label(steered: SynthesisRun) -> None:
    """Each draw with both rollouts gets its constructed label; the synthesis's annotator is
    fetched for the first of them only, not once per draw."""
    store = _store(steered)
    table = Annotator._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        for cell in sorted(store.cells.values(), key=lambda c: c.external_id):
            for level in (cell.low_level, cell.high_level):
                store.rollout_save(cell.external_id, 0, level, Rollout(f"{level} text", None))
    assert len([q for q in queries if f'FROM "{table}"' in q["sql"]]) == 1
    labels = Preference.objects.filter(provider=Provider.SYNTHETIC)
    assert labels.values("annotator").distinct().count() == 1
    assert labels.count() == len(store.cells)
