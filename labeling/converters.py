"""Convert public evaluation datasets into the workbench's JSONL import format.

Why this exists: the importer reads one stream of typed records (task, response, rubric,
preference), while every public benchmark has its own layout. Each converter maps one layout
onto that stream, so the importer never needs to know where data came from.

Pure Python and stdlib only: the conversion can be tested and scripted without Django
settings; ``manage.py convert_dataset`` is only a thin wrapper around `convert` and
`labeling.jsonl.jsonl_write`.

Converters read and check a whole input before handing back any record, so a bad file fails
before a single line of output is written (the data sets are a few MB at most).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Record = dict[str, Any]

SOURCES = ("tau2", "llmbar")

# tau2's "train" lists the tasks meant for training or prompt tuning and "test" the held-out
# evaluation tasks; "base" is simply every task and carries no split.
_TAU2_SPLITS = {"train": "train", "test": "eval"}

# Parts of a tau2 user scenario, in the order a reader needs them.
_SCENARIO_PARTS = (
    ("reason_for_call", "Reason for call"),
    ("known_info", "Known info"),
    ("unknown_info", "Unknown info"),
    ("task_instructions", "Task instructions"),
)


@dataclass
class SkipCounts:
    """LLMBar pairs that did not become preferences, so callers can explain the shortfall.

    The database holds one current label per pair of responses (in either order) per
    annotator, and never a label of a response against itself, so such pairs are dropped
    here rather than rejected by the importer.
    """

    identical_outputs: int = 0  # output_1 == output_2: nothing to compare
    duplicates: int = 0  # same two responses, same winner, already emitted
    conflicts: int = 0  # same two responses, opposite winner: the first label is kept

    def total(self) -> int:
        """All dropped pairs."""
        return self.identical_outputs + self.duplicates + self.conflicts


def tau2_records(domain_dir: Path) -> Iterator[Record]:
    """Records for one tau2-bench domain folder (tasks.json, policy.md, split_tasks.json).

    One task per tau2 task, id ``{domain}-{tau2 id}`` with the folder name as domain; its
    prompt is the customer's scenario and its one document is the domain policy the agent
    must follow. Splits: tau2 "train" (training tasks) -> "train", tau2 "test" (held-out
    evaluation tasks) -> "eval", any other task (or a domain without split_tasks.json)
    -> "unassigned". Tasks with natural-language assertions also get an "expert" rubric, one
    item per assertion. tau2 ships no responses. All tasks come before all rubrics so that
    every reference points back to a record already read.
    """
    domain = domain_dir.name
    tasks_path = domain_dir / "tasks.json"
    tasks = _load_json(tasks_path)
    if not isinstance(tasks, list):
        raise ValueError(f"{tasks_path}: expected a JSON list of tasks")
    policy = {
        "id": "policy",
        "title": f"{domain.capitalize()} agent policy",
        "text": _read_text(domain_dir / "policy.md"),
    }
    splits = _tau2_splits(domain_dir / "split_tasks.json")
    task_records: list[Record] = []
    rubric_records: list[Record] = []
    for index, task in enumerate(tasks):
        try:
            task_record = _tau2_task(domain, task, policy, splits)
            assertions = (task.get("evaluation_criteria") or {}).get("nl_assertions") or []
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{tasks_path}: task #{index} is malformed ({exc!r})") from exc
        task_records.append(task_record)
        if assertions:
            rubric_records.append(
                {
                    "type": "rubric",
                    "task": task_record["id"],
                    "author": "expert",
                    "items": [
                        {"id": f"c{number}", "text": text, "weight": 1.0}
                        for number, text in enumerate(assertions, start=1)
                    ],
                }
            )
    return iter(task_records + rubric_records)


def _tau2_task(
    domain: str, task: dict[str, Any], policy: dict[str, str], splits: dict[str, str]
) -> Record:
    """One tau2 task as a task record (see `tau2_records`)."""
    criteria = task.get("evaluation_criteria") or {}
    metadata = {
        "source": "tau2-bench",
        "purpose": (task.get("description") or {}).get("purpose"),
        "expected_actions": [
            {"name": action["name"], "arguments": action.get("arguments") or {}}
            for action in criteria.get("actions") or []
        ],
        "reward_basis": criteria.get("reward_basis"),
    }
    return {
        "type": "task",
        "id": f"{domain}-{task['id']}",
        "domain": domain,
        "prompt": _render_scenario(task["user_scenario"]["instructions"]),
        "instructions": (
            f"Serve this {domain} customer as the agent, following the attached policy."
        ),
        "documents": [policy],
        "split": splits.get(str(task["id"]), "unassigned"),
        "metadata": {key: value for key, value in metadata.items() if value is not None},
    }


def _render_scenario(scenario: dict[str, str | None]) -> str:
    """The customer's scenario as headed paragraphs, without empty parts or trailing spaces."""
    blocks = []
    for key, heading in _SCENARIO_PARTS:
        text = (scenario.get(key) or "").strip()
        if text:
            body = "\n".join(line.rstrip() for line in text.splitlines())
            blocks.append(f"{heading}:\n{body}")
    return "\n\n".join(blocks)


def _tau2_splits(path: Path) -> dict[str, str]:
    """Map tau2 task id -> workbench split; empty when the domain has no split file."""
    if not path.exists():
        return {}
    raw = _load_json(path)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object of split name -> task ids")
    mapping: dict[str, str] = {}
    for tau2_split, split in _TAU2_SPLITS.items():
        for task_id in raw.get(tau2_split, []):
            if mapping.setdefault(str(task_id), split) != split:
                raise ValueError(f"{path}: task {task_id} is in both train and test")
    return mapping


def llmbar_subset(file_name: str) -> str:
    """Subset name of an LLMBar file: LLMBar_Natural.json -> llmbar-natural,
    Processed_MT-Bench.json -> mt-bench. It prefixes ids, so subsets never collide."""
    return Path(file_name).stem.removeprefix("Processed_").lower().replace("_", "-")


def _llmbar_labeller(subset: str, path: Path) -> tuple[str, str]:
    """(provider, annotator) of a subset's labels.

    MT-Bench labels are human expert votes. LLMBar's own labels are gold labels the benchmark
    authors set while building or curating each pair (one output objectively better), not
    annotator votes, so they are filed as synthetic under one annotator "llmbar". Any other
    file is refused: guessing who labelled it would mislabel data.
    """
    if subset == "mt-bench":
        return "human", "mt-bench-experts"
    if subset.startswith("llmbar-"):
        return "synthetic", "llmbar"
    raise ValueError(
        f"{path}: not an LLMBar file (expected LLMBar_*.json or Processed_MT-Bench.json)"
    )


def llmbar_records(path: Path, skips: SkipCounts | None = None) -> Iterator[Record]:
    """Records for one LLMBar file (a list of {input, output_1, output_2, label: 1 or 2}).

    Pairs are grouped by input: one task per unique input (id ``{subset}-{sha1(input)[:12]}``,
    split "unassigned") and one response per unique output within it (id
    ``{task id}/{sha1(output)[:12]}``), because MT-Bench reuses inputs and outputs across
    pairs. Each pair becomes a preference a=output_1, b=output_2, choice "a" for label 1 and
    "b" for label 2, except pairs that the database could not hold, counted in `skips`:
    identical outputs, and repeats of an already labelled pair in either order (a repeat with
    the opposite winner keeps the first label and counts as a conflict). Responses carry no
    "source": the data set does not say which model wrote them. Order: tasks, responses,
    preferences.
    """
    skips = skips if skips is not None else SkipCounts()
    subset = llmbar_subset(path.name)
    provider, annotator = _llmbar_labeller(subset, path)
    pairs = _load_json(path)
    if not isinstance(pairs, list):
        raise ValueError(f"{path}: expected a JSON list of pairs")
    tasks: dict[str, Record] = {}  # input text -> task
    responses: dict[str, Record] = {}  # response id -> response
    preferences: list[Record] = []
    winners: dict[frozenset[str], str] = {}  # the two response ids -> id of the preferred one
    for index, pair in enumerate(pairs):
        if (
            not isinstance(pair, dict)
            or not all(isinstance(pair.get(key), str) for key in ("input", "output_1", "output_2"))
            or pair.get("label") not in (1, 2)
        ):
            raise ValueError(
                f"{path}: pair #{index} needs string input, output_1, output_2 and label 1 or 2"
            )
        task = tasks.setdefault(pair["input"], _llmbar_task(subset, pair["input"]))
        a = _llmbar_response(task["id"], pair["output_1"], responses)
        b = _llmbar_response(task["id"], pair["output_2"], responses)
        if a == b:
            skips.identical_outputs += 1
            continue
        choice = "a" if pair["label"] == 1 else "b"
        winner = a if choice == "a" else b
        sides = frozenset((a, b))
        if sides in winners:
            if winners[sides] == winner:
                skips.duplicates += 1
            else:
                skips.conflicts += 1
            continue
        winners[sides] = winner
        preferences.append(
            {
                "type": "preference",
                "a": a,
                "b": b,
                "choice": choice,
                "provider": provider,
                "annotator": annotator,
            }
        )
    return iter([*tasks.values(), *responses.values(), *preferences])


def _llmbar_task(subset: str, text: str) -> Record:
    """The task record of one LLMBar input."""
    return {
        "type": "task",
        "id": f"{subset}-{_short_hash(text)}",
        "domain": subset,
        "prompt": text,
        "split": "unassigned",
        "metadata": {"source": subset},
    }


def _llmbar_response(task_id: str, content: str, responses: dict[str, Record]) -> str:
    """Id of the response with this content in this task, registering it on first sight."""
    response_id = f"{task_id}/{_short_hash(content)}"
    responses.setdefault(
        response_id,
        {"type": "response", "id": response_id, "task": task_id, "content": content},
    )
    return response_id


def _short_hash(text: str) -> str:
    """Stable 12-hex-digit id part, so re-converting gives the same ids (imports are updates)."""
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:12]


def convert(source: str, path: Path, skips: SkipCounts | None = None) -> Iterator[Record]:
    """Records from a data set: ``source`` is "tau2" or "llmbar".

    tau2: ``path`` is a domain folder (holding tasks.json) or the tau2 root, meaning every
    domain folder in it, in name order. llmbar: ``path`` is one file or a folder, meaning every
    *.json in it, in name order. Raises ValueError naming the path when the input is missing
    or invalid; this happens on the call, before any record is returned.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r}; expected one of: {', '.join(SOURCES)}")
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    if source == "tau2":
        if (path / "tasks.json").is_file():
            domains = [path]
        else:
            domains = sorted(p for p in path.iterdir() if (p / "tasks.json").is_file())
        if not domains:
            raise ValueError(f"{path}: no tau2 domain folder (one holding tasks.json) found")
        return iter([record for domain in domains for record in tau2_records(domain)])
    files = [path] if path.is_file() else sorted(path.glob("*.json"))
    if not files:
        raise ValueError(f"{path}: no LLMBar *.json file found")
    return iter([record for file in files for record in llmbar_records(file, skips)])


def _read_text(path: Path) -> str:
    """File contents, with unreadable files reported as ValueError naming the path."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot read {path}: {reason}") from exc


def _load_json(path: Path) -> Any:
    """Parsed JSON file, with unreadable or invalid files reported as ValueError naming the path."""
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
