"""Tests of labeling.converters against the real tau2-bench and LLMBar files.

Expected numbers are recomputed from the raw files wherever possible, so a test checks the
conversion rules rather than restating the converter's own output. Edge cases the real data
does not contain (identical outputs, conflicting labels, bad input) use small files written
to tmp_path. No Django and no database is needed.
"""

import hashlib
import io
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labeling.converters import SkipCounts, convert, llmbar_records, tau2_records
from labeling.jsonl import jsonl_write

DATASETS = Path(__file__).resolve().parents[3] / "shared" / "datasets"
TAU2 = DATASETS / "tau2"
LLMBAR = DATASETS / "llmbar"
MT_BENCH = LLMBAR / "Processed_MT-Bench.json"

needs_data = pytest.mark.skipif(
    not DATASETS.is_dir(),
    reason="needs ../shared/datasets (the shared data set folder beside the repo); "
    "a fresh clone has none",
)

Record = dict[str, Any]


def sha12(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def by_type(records: list[Record], kind: str) -> list[Record]:
    return [record for record in records if record["type"] == kind]


def raw(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


# --- tau2 --------------------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize(("domain", "tasks", "rubrics"), [("airline", 50, 50), ("retail", 114, 40)])
def test_tau2_counts(domain: str, tasks: int, rubrics: int) -> None:
    records = list(tau2_records(TAU2 / domain))
    raw_tasks = raw(TAU2 / domain / "tasks.json")
    with_assertions = [
        task for task in raw_tasks if (task["evaluation_criteria"] or {}).get("nl_assertions")
    ]
    assert len(by_type(records, "task")) == len(raw_tasks) == tasks
    assert len(by_type(records, "rubric")) == len(with_assertions) == rubrics
    assert not by_type(records, "response")
    assert not by_type(records, "preference")
    assert {record["domain"] for record in by_type(records, "task")} == {domain}


@needs_data
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_tau2_splits_follow_split_file(domain: str) -> None:
    splits = raw(TAU2 / domain / "split_tasks.json")
    records = by_type(list(tau2_records(TAU2 / domain)), "task")
    by_split = Counter(record["split"] for record in records)
    assert by_split == {"train": len(splits["train"]), "eval": len(splits["test"])}
    train_ids = {f"{domain}-{task_id}" for task_id in splits["train"]}
    assert {record["id"] for record in records if record["split"] == "train"} == train_ids


@needs_data
def test_tau2_known_task() -> None:
    records = list(tau2_records(TAU2 / "airline"))
    task = next(record for record in records if record["id"] == "airline-0")
    prompt = task["prompt"]
    assert prompt.startswith("Reason for call:\nYou want to cancel reservation EHGLP3.")
    assert "Known info:\nYou are Emma Kim.\nYour user id is emma_kim_9957." in prompt
    assert "Task instructions:\nIf Agent tells you that cancellation is not possible," in prompt
    assert "Unknown info" not in prompt  # null in the source: skipped
    assert all(line == line.rstrip() for line in prompt.splitlines())
    assert task["documents"] == [
        {
            "id": "policy",
            "title": "Airline agent policy",
            "text": (TAU2 / "airline" / "policy.md").read_text(encoding="utf-8"),
        }
    ]
    assert "policy" in task["instructions"]
    assert task["metadata"]["source"] == "tau2-bench"
    assert task["metadata"]["purpose"].startswith("Testing that agent refuses to proceed")
    assert task["metadata"]["expected_actions"] == []
    assert task["metadata"]["reward_basis"] == ["DB", "COMMUNICATE"]
    rubric = next(r for r in by_type(records, "rubric") if r["task"] == "airline-0")
    assert rubric["author"] == "expert"
    assert rubric["items"] == [
        {"id": "c1", "text": "Agent should refuse to proceed with the cancellation.", "weight": 1.0}
    ]


@needs_data
def test_tau2_actions_and_absent_purpose() -> None:
    raw_task = raw(TAU2 / "retail" / "tasks.json")[1]
    task = next(r for r in tau2_records(TAU2 / "retail") if r["id"] == "retail-1")
    assert raw_task["description"]["purpose"] is None
    assert "purpose" not in task["metadata"]  # None values are dropped
    assert task["metadata"]["expected_actions"] == [
        {"name": action["name"], "arguments": action["arguments"]}
        for action in raw_task["evaluation_criteria"]["actions"]
    ]
    assert task["metadata"]["expected_actions"][0]["name"] == "find_user_id_by_name_zip"


@needs_data
def test_tau2_rubric_items_are_the_assertions() -> None:
    raw_tasks = {task["id"]: task for task in raw(TAU2 / "retail" / "tasks.json")}
    for rubric in by_type(list(tau2_records(TAU2 / "retail")), "rubric"):
        assertions = raw_tasks[rubric["task"].removeprefix("retail-")]["evaluation_criteria"][
            "nl_assertions"
        ]
        assert [item["text"] for item in rubric["items"]] == assertions
        assert [item["id"] for item in rubric["items"]] == [
            f"c{n}" for n in range(1, len(assertions) + 1)
        ]


@needs_data
def test_tau2_root_converts_every_domain_in_order() -> None:
    records = list(convert("tau2", TAU2))
    tasks = by_type(records, "task")
    assert len(tasks) == 50 + 114
    assert [task["domain"] for task in tasks] == ["airline"] * 50 + ["retail"] * 114
    # Every rubric follows the task it refers to.
    seen: set[str] = set()
    for record in records:
        if record["type"] == "task":
            seen.add(record["id"])
        else:
            assert record["task"] in seen


@needs_data
def test_tau2_without_split_file_is_unassigned(tmp_path: Path) -> None:
    domain = tmp_path / "airline"
    domain.mkdir()
    for name in ("tasks.json", "policy.md"):
        shutil.copy(TAU2 / "airline" / name, domain / name)
    tasks = by_type(list(convert("tau2", domain)), "task")
    assert len(tasks) == 50
    assert {task["split"] for task in tasks} == {"unassigned"}


def test_tau2_task_in_train_and_test_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "tasks.json").write_text("[]", encoding="utf-8")
    (tmp_path / "policy.md").write_text("Be nice.", encoding="utf-8")
    (tmp_path / "split_tasks.json").write_text(
        json.dumps({"train": ["1"], "test": ["1"]}), encoding="utf-8"
    )
    with pytest.raises(ValueError, match="task 1 is in both train and test"):
        convert("tau2", tmp_path)


def test_tau2_malformed_task_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "tasks.json").write_text(json.dumps([{"id": "0"}]), encoding="utf-8")
    (tmp_path / "policy.md").write_text("Be nice.", encoding="utf-8")
    with pytest.raises(ValueError, match=r"tasks\.json: task #0 is malformed"):
        convert("tau2", tmp_path)


# --- LLMBar ------------------------------------------------------------------------------


def expected_preferences(pairs: list[Record]) -> dict[tuple[str, frozenset[str]], str]:
    """(input, the two outputs) -> winning output, first label kept; identical outputs left
    out. An independent restatement of the dedup rule, keyed on texts rather than ids."""
    expected: dict[tuple[str, frozenset[str]], str] = {}
    for pair in pairs:
        if pair["output_1"] != pair["output_2"]:
            winner = pair["output_1"] if pair["label"] == 1 else pair["output_2"]
            expected.setdefault(
                (pair["input"], frozenset((pair["output_1"], pair["output_2"]))), winner
            )
    return expected


@needs_data
def test_mt_bench_counts() -> None:
    pairs = raw(MT_BENCH)
    skips = SkipCounts()
    records = list(llmbar_records(MT_BENCH, skips))
    assert len(pairs) == 200
    assert len(by_type(records, "task")) == len({p["input"] for p in pairs}) == 75
    assert len(by_type(records, "response")) == len(
        {(p["input"], p[side]) for p in pairs for side in ("output_1", "output_2")}
    )
    preferences = by_type(records, "preference")
    assert len(preferences) == len(expected_preferences(pairs))
    assert len(preferences) + skips.total() == len(pairs)
    # The data repeats 5 pairs with the sides swapped and the same winner; none conflicts.
    assert skips == SkipCounts(identical_outputs=0, duplicates=5, conflicts=0)


@needs_data
def test_mt_bench_choice_mapping_and_labeller() -> None:
    pairs = raw(MT_BENCH)
    preferences = {
        (p["a"], p["b"]): p for p in by_type(list(llmbar_records(MT_BENCH)), "preference")
    }
    for label, choice in ((1, "a"), (2, "b")):
        pair = next(p for p in pairs if p["label"] == label)
        task_id = f"mt-bench-{sha12(pair['input'])}"
        preference = preferences[
            (f"{task_id}/{sha12(pair['output_1'])}", f"{task_id}/{sha12(pair['output_2'])}")
        ]
        assert preference["choice"] == choice
        assert preference["provider"] == "human"
        assert preference["annotator"] == "mt-bench-experts"


@needs_data
def test_mt_bench_preferred_texts_match_labels() -> None:
    records = list(llmbar_records(MT_BENCH))
    texts = {r["id"]: r["content"] for r in by_type(records, "response")}
    prompts = {r["id"]: r["prompt"] for r in by_type(records, "task")}
    task_of = {r["id"]: r["task"] for r in by_type(records, "response")}
    got = {
        (prompts[task_of[p["a"]]], frozenset((texts[p["a"]], texts[p["b"]]))): texts[
            p["a"] if p["choice"] == "a" else p["b"]
        ]
        for p in by_type(records, "preference")
    }
    assert got == expected_preferences(raw(MT_BENCH))


@needs_data
@pytest.mark.parametrize(
    ("file_name", "subset", "provider", "annotator"),
    [
        ("LLMBar_Natural.json", "llmbar-natural", "synthetic", "llmbar"),
        ("LLMBar_Adversarial_GPTInst.json", "llmbar-adversarial-gptinst", "synthetic", "llmbar"),
        ("LLMBar_Adversarial_GPTOut.json", "llmbar-adversarial-gptout", "synthetic", "llmbar"),
        ("LLMBar_Adversarial_Manual.json", "llmbar-adversarial-manual", "synthetic", "llmbar"),
        ("LLMBar_Adversarial_Neighbor.json", "llmbar-adversarial-neighbor", "synthetic", "llmbar"),
        ("Processed_MT-Bench.json", "mt-bench", "human", "mt-bench-experts"),
    ],
)
def test_llmbar_subsets(file_name: str, subset: str, provider: str, annotator: str) -> None:
    pairs = raw(LLMBAR / file_name)
    skips = SkipCounts()
    records = list(llmbar_records(LLMBAR / file_name, skips))
    tasks = by_type(records, "task")
    assert {(t["domain"], t["split"], t["metadata"]["source"]) for t in tasks} == {
        (subset, "unassigned", subset)
    }
    assert all(t["id"] == f"{subset}-{sha12(t['prompt'])}" for t in tasks)
    preferences = by_type(records, "preference")
    assert {(p["provider"], p["annotator"]) for p in preferences} == {(provider, annotator)}
    assert len(preferences) == len(expected_preferences(pairs)) == len(pairs) - skips.total()
    # Records come grouped: tasks, then responses, then preferences.
    kinds = [record["type"] for record in records]
    assert kinds == sorted(kinds, key=["task", "response", "preference"].index)


@needs_data
def test_llmbar_preferences_compare_two_responses_of_one_task() -> None:
    records = list(convert("llmbar", LLMBAR))
    task_of = {r["id"]: r["task"] for r in by_type(records, "response")}
    task_ids = {r["id"] for r in by_type(records, "task")}
    assert set(task_of.values()) <= task_ids
    for preference in by_type(records, "preference"):
        assert preference["a"] != preference["b"]
        assert task_of[preference["a"]] == task_of[preference["b"]]
    pairs_seen = [frozenset((p["a"], p["b"])) for p in by_type(records, "preference")]
    assert len(pairs_seen) == len(set(pairs_seen))  # one label per pair, either order


def write_pairs(folder: Path, name: str, pairs: list[Record]) -> Path:
    path = folder / name
    path.write_text(json.dumps(pairs), encoding="utf-8")
    return path


def test_llmbar_skips_identical_duplicate_and_conflicting_pairs(tmp_path: Path) -> None:
    path = write_pairs(
        tmp_path,
        "LLMBar_Natural.json",
        [
            {"input": "Q", "output_1": "x", "output_2": "y", "label": 1},
            {"input": "Q", "output_1": "x", "output_2": "x", "label": 2},  # identical
            {"input": "Q", "output_1": "x", "output_2": "y", "label": 1},  # duplicate
            {"input": "Q", "output_1": "y", "output_2": "x", "label": 2},  # swapped duplicate
            {"input": "Q", "output_1": "y", "output_2": "x", "label": 1},  # conflict
            {"input": "R", "output_1": "x", "output_2": "y", "label": 2},  # other task: kept
        ],
    )
    skips = SkipCounts()
    records = list(llmbar_records(path, skips))
    assert skips == SkipCounts(identical_outputs=1, duplicates=2, conflicts=1)
    q, r = f"llmbar-natural-{sha12('Q')}", f"llmbar-natural-{sha12('R')}"
    assert [(p["a"], p["b"], p["choice"]) for p in by_type(records, "preference")] == [
        (f"{q}/{sha12('x')}", f"{q}/{sha12('y')}", "a"),
        (f"{r}/{sha12('x')}", f"{r}/{sha12('y')}", "b"),
    ]
    assert len(by_type(records, "response")) == 4  # x and y, per task


def test_llmbar_bad_label_names_the_pair(tmp_path: Path) -> None:
    path = write_pairs(
        tmp_path,
        "LLMBar_Natural.json",
        [{"input": "Q", "output_1": "x", "output_2": "y", "label": 3}],
    )
    with pytest.raises(ValueError, match=r"LLMBar_Natural\.json: pair #0 needs"):
        llmbar_records(path)


def test_llmbar_unknown_file_is_refused(tmp_path: Path) -> None:
    path = write_pairs(tmp_path, "other.json", [])
    with pytest.raises(ValueError, match="not an LLMBar file"):
        convert("llmbar", path)


# --- whole output ------------------------------------------------------------------------


def all_records() -> Iterator[Record]:
    yield from convert("tau2", TAU2)
    yield from convert("llmbar", LLMBAR)


@needs_data
def test_ids_are_unique() -> None:
    records = list(all_records())
    ids = [r["id"] for r in records if r["type"] in ("task", "response")]
    assert len(ids) == len(set(ids))
    rubric_tasks = [r["task"] for r in by_type(records, "rubric")]
    assert len(rubric_tasks) == len(set(rubric_tasks))
    for rubric in by_type(records, "rubric"):
        item_ids = [item["id"] for item in rubric["items"]]
        assert len(item_ids) == len(set(item_ids))


@needs_data
def test_jsonl_write_round_trips_every_record() -> None:
    records = list(all_records())
    out = io.StringIO()
    assert jsonl_write(records, out) == len(records)
    lines = out.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == records
    assert all(", " not in line[:20] for line in lines)  # compact separators


def test_jsonl_write_keeps_non_ascii_readable() -> None:
    out = io.StringIO()
    assert jsonl_write([{"type": "task", "prompt": "café"}, {"type": "task"}], out) == 2
    assert out.getvalue() == '{"type":"task","prompt":"café"}\n{"type":"task"}\n'


# --- convert() errors --------------------------------------------------------------------


@pytest.mark.parametrize("source", ["tau2", "llmbar"])
def test_convert_missing_path(tmp_path: Path, source: str) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError, match=f"{missing} does not exist"):
        convert(source, missing)


def test_convert_unknown_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown source 'squad'; expected one of: tau2, llmbar"):
        convert("squad", tmp_path)


def test_convert_folders_without_data(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no tau2 domain folder"):
        convert("tau2", tmp_path)
    with pytest.raises(ValueError, match=r"no LLMBar \*\.json file"):
        convert("llmbar", tmp_path)


def test_convert_invalid_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "LLMBar_Natural.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(ValueError, match=r"LLMBar_Natural\.json is not valid JSON"):
        convert("llmbar", path)


def test_convert_tau2_domain_without_policy(tmp_path: Path) -> None:
    (tmp_path / "tasks.json").write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot read .*policy\.md"):
        convert("tau2", tmp_path)
