"""Import and export of FORMATS.md "Synthesis records": all or nothing, upsert by id, any
order, errors with line and field, the implied synthetic preference, a labels round trip."""

import copy
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labeling.exports import labels_records
from labeling.exports import synthesis_records as synthesis_records_exported
from labeling.imports import ImportRejected, jsonl_import
from labeling.models import Preference, Project, SynthesisCell, SynthesisDraw, SynthesisVote
from tests.labeling.helpers import db_state, synthesis_records, write_jsonl


def imported(project: Project, tmp_path: Path, records: list[Any]) -> Any:
    return jsonl_import(project=project, path=write_jsonl(tmp_path / "s.jsonl", records))


def problems(project: Project, tmp_path: Path, records: list[Any]) -> list[tuple[int, str, str]]:
    with pytest.raises(ImportRejected) as info:
        imported(project, tmp_path, records)
    assert not SynthesisDraw.objects.exists() and not Preference.objects.exists()
    return [(e.line, e.field, e.message) for e in info.value.errors]


def test_a_synthesis_imports_its_cells_draws_votes_and_implied_preferences(
    project: Project, tmp_path: Path
) -> None:
    report = imported(project, tmp_path, synthesis_records())
    assert (report.counts["synthesis"], report.counts["synthesis_draw"]) == (1, 5)
    cells = {c.external_id: c for c in SynthesisCell.objects.all()}
    assert {k: (c.contrast, c.task.external_id, c.agent) for k, c in cells.items()} == {
        "c1": ("bad-ok", "a1", "m-a"),
        "c2": ("ok-good", "a2", "m-a"),
        "c3": ("bad-good", "a1", "m-a"),
    }
    outcomes = {
        (d.cell.external_id, d.retry): (d.outcome, d.cost) for d in SynthesisDraw.objects.all()
    }
    assert outcomes == {
        ("c1", 0): ("vetoed", 0.25),
        ("c1", 1): ("kept", 0.5),
        ("c2", 0): ("kept", 0.25),
        ("c3", 0): ("vetoed", 0.0),
        ("c3", 1): ("vetoed", 0.0),
    }
    votes = SynthesisVote.objects.filter(draw__cell__external_id="c1", draw__retry=0)
    assert list(votes.values_list("position", "judge", "agrees")) == [
        (0, "j1", True),
        (1, "j2", False),
    ]
    # Three draws name responses, so three synthetic preferences, each for the higher level.
    implied = Preference.objects.filter(provider="synthetic", annotator__name="s1")
    assert sorted(
        (p.response_a.external_id, p.response_b.external_id, p.choice, p.dimension.name)
        for p in implied
    ) == [
        ("a1/bad/0", "a1/ok/0", "b", "friendliness"),
        ("a1/bad/1", "a1/ok/1", "b", "friendliness"),
        ("a2/ok/0", "a2/good/0", "b", "friendliness"),
    ]


def test_importing_twice_and_export_then_import_change_nothing(
    project: Project, tmp_path: Path
) -> None:
    imported(project, tmp_path, synthesis_records())
    before = db_state(project)
    again = imported(project, tmp_path, synthesis_records())
    assert not again.changed and db_state(project) == before
    exported = list(labels_records(project=project))
    assert [r["type"] for r in exported].count("synthesis_draw") == 5
    report = jsonl_import(project=project, path=write_jsonl(tmp_path / "e.jsonl", exported))
    assert not report.changed and db_state(project) == before


def test_labels_export_of_a_synthesis_rebuilds_it_in_a_fresh_project(
    project: Project, tmp_path: Path
) -> None:
    records = synthesis_records()
    records[1]["votes"][1] |= {"slot_order": "ba", "answers": ['{"answer": "A"}']}
    records[1] |= {"usage": {"rollout": {"calls": 2, "tokens": 900}}}
    imported(project, tmp_path, records)
    exported = list(labels_records(project=project))
    other = Project.objects.create(slug="other", name="Other")
    jsonl_import(project=other, path=write_jsonl(tmp_path / "e.jsonl", exported))
    assert list(labels_records(project=other)) == exported
    draw = SynthesisDraw.objects.get(
        cell__synthesis__project=other, cell__external_id="c1", retry=0
    )
    assert draw.usage == {"rollout": {"calls": 2, "tokens": 900}}
    assert draw.votes.get(position=1).slot_order == "ba"


def test_an_update_replaces_a_draws_votes(project: Project, tmp_path: Path) -> None:
    imported(project, tmp_path, synthesis_records())
    records = synthesis_records()
    # c3's first draw now passes j1 and is vetoed by j2.
    records[3]["votes"] = [{"judge": "j1", "agrees": True}, {"judge": "j2", "agrees": None}]
    report = imported(project, tmp_path, records)
    assert report.updated["synthesis_draw"] == 1 and report.unchanged["synthesis_draw"] == 4
    draw = SynthesisDraw.objects.get(cell__external_id="c3", retry=0)
    assert list(draw.votes.values_list("judge", "agrees")) == [("j1", True), ("j2", None)]


def broken(change: Any) -> list[Any]:
    records = copy.deepcopy(synthesis_records())
    change(records)
    return records


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda r: r[0].update(levels=["ok", "bad"]),
            (1, "levels", "two different levels, lower first (bad < ok < good), not 'ok' then 'bad'"),
        ),
        (
            lambda r: r[0].update(votes=[{"judge": "j1", "agrees": False}, {"judge": "j2", "agrees": True}]),
            (1, "votes", "vote 1 is a veto, so the cascade stops there and no later judge votes"),
        ),
        (
            lambda r: r[0].update(votes=[{"judge": "j2", "agrees": True}, {"judge": "j1", "agrees": True}]),
            (1, "votes", "vote 1 is by 'j2'; the cascade ['j1', 'j2'] has 'j1' there"),
        ),
        (
            lambda r: r[0].update(votes=[{"judge": "j1", "agrees": True}]),
            (1, "outcome", "votes from 1 of 2 judges and no veto; give 'outcome' ('failed' or 'pending') for an unfinished draw"),
        ),
        (
            lambda r: r[0].update(retry=2),
            (1, "retry", "retry 2 is above synthesis 's1''s retries (1)"),
        ),
        (
            lambda r: r[1].update(agent="m-b"),
            (2, "cell", "cell 'c1' has another task, dimension, levels or agent on line 1; a cell's draws share them"),
        ),
        (
            lambda r: r[2].update(responses=["a2/ok/0", "a1/ok/0"]),
            (3, "responses", "response 'a1/ok/0' does not belong to task 'a2'"),
        ),
        (
            lambda r: r[2].update(synthesis="nope"),
            (3, "synthesis", "synthesis 'nope' not found in this file or the project"),
        ),
        (
            lambda r: r.pop(1),
            (1, "retry", "cell 'c1' has retry 1 but no retry 0: retries count up from 0"),
        ),
        (
            lambda r: r.append({**r[2], "retry": 1, "responses": None}),
            (16, "retry", "cell 'c2' is redrawn after a kept draw (retry 0); only a rejected cell is redrawn"),
        ),
    ],
)  # fmt: skip
def test_a_bad_draw_rejects_the_file_naming_line_and_field(
    project: Project, tmp_path: Path, change: Any, expected: tuple[int, str, str]
) -> None:
    records = broken(change)
    if records[-1].get("responses", "") is None:
        del records[-1]["responses"]
    assert expected in problems(project, tmp_path, records)


def test_a_contradicting_synthetic_preference_is_an_error_in_either_order(
    project: Project, tmp_path: Path
) -> None:
    contrary = {"type": "preference", "a": "a2/ok/0", "b": "a2/good/0", "choice": "a",
                "dimension": "friendliness", "provider": "synthetic", "annotator": "s1"}  # fmt: skip
    found = problems(project, tmp_path, [*synthesis_records(), contrary])
    assert any(field == "responses" and "says otherwise" in msg for _, field, msg in found)
    # Held first, then contradicted by a later file.
    imported(project, tmp_path, synthesis_records())
    with pytest.raises(ImportRejected) as info:
        imported(project, tmp_path, [contrary])
    assert [(e.line, e.field) for e in info.value.errors] == [(1, "choice")]
    # The same preference, agreeing with the draw, is harmless.
    agreeing = {**contrary, "choice": "b"}
    assert not imported(project, tmp_path, [agreeing]).changed


def test_a_changed_cell_field_counts_its_draws_as_updated(project: Project, tmp_path: Path) -> None:
    imported(project, tmp_path, synthesis_records())
    records = synthesis_records()
    for record in records[3:5]:  # both draws of c3
        record["agent"] = "m-b"
    records[2]["votes"][0]["answers"] = [{"reasoning": "warmer", "answer": "B"}]
    report = imported(project, tmp_path, records)
    assert (report.updated["synthesis_draw"], report.unchanged["synthesis_draw"]) == (3, 2)
    assert SynthesisCell.objects.get(external_id="c3").agent == "m-b"
    vote = SynthesisVote.objects.get(draw__cell__external_id="c2", position=0)
    assert vote.answers == [{"reasoning": "warmer", "answer": "B"}]


def with_undrawn_cell(records: list[Any]) -> list[Any]:
    for record in records:
        if record["type"] == "synthesis":
            record["undrawn_cells"] = [{"id": "c4", "task": "a2", "dimension": "friendliness",
                                        "levels": ["bad", "ok"], "error": "steering failed"}]  # fmt: skip
    return records


def test_a_cell_without_draws_is_kept_and_round_trips(project: Project, tmp_path: Path) -> None:
    imported(project, tmp_path, with_undrawn_cell(synthesis_records()))
    cell = SynthesisCell.objects.get(external_id="c4")
    assert (cell.contrast, cell.error, cell.draws.count()) == ("bad-ok", "steering failed", 0)
    before = db_state(project)
    assert not imported(project, tmp_path, with_undrawn_cell(synthesis_records())).changed
    exported = list(labels_records(project=project))
    assert db_state(project) == before
    other = Project.objects.create(slug="other", name="Other")
    jsonl_import(project=other, path=write_jsonl(tmp_path / "e.jsonl", exported))
    assert list(labels_records(project=other)) == exported
    # A file that leaves the list out changes nothing: the cell stays as it was.
    assert not imported(project, tmp_path, synthesis_records()).changed
    assert SynthesisCell.objects.filter(external_id="c4").exists()
    changed = with_undrawn_cell(synthesis_records())
    changed[5]["undrawn_cells"][0]["error"] = "writer timed out"
    assert imported(project, tmp_path, changed).updated["synthesis"] == 1
    assert (
        SynthesisCell.objects.get(synthesis__project=project, external_id="c4").error
        == "writer timed out"
    )


def test_an_undrawn_cell_with_a_draw_is_an_error(project: Project, tmp_path: Path) -> None:
    records = with_undrawn_cell(synthesis_records())
    records.append({**records[2], "cell": "c4", "task": "a2", "levels": ["bad", "ok"],
                    "responses": None})  # fmt: skip
    del records[-1]["responses"]
    found = problems(project, tmp_path, records)
    assert (
        16,
        "cell",
        "cell 'c4' has a draw, but synthesis 's1' on line 6 lists it among its undrawn cells",
    ) in found


def with_undrawn_cells(records: list[Any], count: int, error: str) -> list[Any]:
    for record in records:
        if record["type"] == "synthesis":
            record["undrawn_cells"] = [
                {"id": f"u{i}", "task": "a2", "dimension": "friendliness",
                 "levels": ["bad", "ok"], "error": error}
                for i in range(count)
            ]  # fmt: skip
    return records


def test_undrawn_cells_errors_are_written_without_a_query_per_cell(db: Any, tmp_path: Path) -> None:
    queries = []
    for count in (1, 6):
        project = Project.objects.create(slug=f"p{count}", name=f"P{count}")
        imported(project, tmp_path, with_undrawn_cells(synthesis_records(), count, "first"))
        with CaptureQueriesContext(connection) as captured:
            imported(project, tmp_path, with_undrawn_cells(synthesis_records(), count, "second"))
        queries.append(len(captured))
        errors = SynthesisCell.objects.filter(synthesis__project=project, draws__isnull=True)
        assert set(errors.values_list("error", flat=True)) == {"second"}
        assert errors.count() == count
    assert queries[0] == queries[1]


def test_implied_preferences_are_written_together(project: Project, tmp_path: Path) -> None:
    with CaptureQueriesContext(connection) as captured:
        imported(project, tmp_path, synthesis_records())
    inserts = [q for q in captured if q["sql"].startswith('INSERT INTO "labeling_preference"')]
    assert Preference.objects.filter(provider="synthetic", annotator__name="s1").count() == 3
    assert len(inserts) == 1


def test_the_export_reads_undrawn_cells_once_for_every_synthesis(
    project: Project, tmp_path: Path
) -> None:
    imported(project, tmp_path, with_undrawn_cell(synthesis_records()))
    with CaptureQueriesContext(connection) as one:
        first = list(synthesis_records_exported(project=project))
    more = [
        {"type": "synthesis", "id": f"s{n}", "judges": ["j1"],
         "undrawn_cells": [{"id": "u", "task": "a2", "dimension": "friendliness",
                            "levels": ["ok", "good"]}]}
        for n in (2, 3)
    ]  # fmt: skip
    imported(project, tmp_path, more)
    with CaptureQueriesContext(connection) as three:
        exported = list(synthesis_records_exported(project=project))
    assert exported[:1] == first[:1]
    assert [r["undrawn_cells"] for r in exported[1:3]] == [
        [{"id": "u", "task": "a2", "dimension": "friendliness", "levels": ["ok", "good"]}]
    ] * 2
    assert len(three) == len(one)
