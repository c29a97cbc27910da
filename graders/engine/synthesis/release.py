"""Kept pairs in the layout of the PADME data release (github.com/chc012/padme, dataset/README.md:
benchmark/eval_dataset.json and benchmark/eval_answers.json), and that layout read back.

Two JSON files, each a list of objects, joined on `id` and on nothing else, because a record
that carried both the texts and the labels would hand over the answer:

- the blind dataset, one object per pair: `id`, `criterion_name`, `criterion_description`,
  `prompt` (the shared context: the task prompt and its documents), `response_1`, `response_2`
  (the two responses as rendered text, in a slot order drawn per pair with the seed);
- the answers: `id`, `correct_response` (1 or 2: the slot of the higher level), `levels` (the
  two levels in slot order), `positive_hint` and `negative_hint` (the steering instructions of
  the higher and the lower level, "" when unknown), `group_id` (the cell: task and dimension),
  `agent`; and, as our extensions (optional on import): `task`, `domain` and `responses` (the
  two response ids in slot order).
"""

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graders.engine.synthesis.types import LEVELS

BLIND_KEYS = ("id", "criterion_name", "criterion_description", "prompt", "response_1", "response_2")


@dataclass(frozen=True)
class ReleasePair:
    """One kept pair: `low_*` is the lower level's side, `high_*` the higher's."""

    id: str
    criterion_name: str
    criterion_description: str
    prompt: str
    low_text: str
    high_text: str
    low_level: str
    high_level: str
    agent: str = ""
    group_id: str = ""
    low_hint: str = ""
    high_hint: str = ""
    task: str = ""
    domain: str = ""
    low_response: str = ""
    high_response: str = ""


def better_second(pair_id: str, seed: int) -> bool:
    """Whether the higher level goes in slot 2: a fair coin per pair, fixed by the seed and the
    pair's id so that a re-export shows every pair as before."""
    return random.Random(f"{seed}:{pair_id}").random() < 0.5


def release_files(
    pairs: Sequence[ReleasePair], *, seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The blind dataset and the answers for `pairs`, in their order."""
    blind, answers = [], []
    for pair in pairs:
        second = better_second(pair.id, seed)
        texts = (pair.low_text, pair.high_text) if second else (pair.high_text, pair.low_text)
        levels = [pair.low_level, pair.high_level] if second else [pair.high_level, pair.low_level]
        ids = [pair.low_response, pair.high_response]
        blind.append(
            {
                "id": pair.id,
                "criterion_name": pair.criterion_name,
                "criterion_description": pair.criterion_description,
                "prompt": pair.prompt,
                "response_1": texts[0],
                "response_2": texts[1],
            }
        )
        answers.append(
            {
                "id": pair.id,
                "correct_response": 2 if second else 1,
                "levels": levels,
                "positive_hint": pair.high_hint,
                "negative_hint": pair.low_hint,
                "group_id": pair.group_id,
                "agent": pair.agent,
                "task": pair.task,
                "domain": pair.domain,
                "responses": ids if second else ids[::-1],
            }
        )
    return blind, answers


class ReleaseInvalid(ValueError):
    """The two files do not form a release; `problems` lists each one as "file item N (id):
    field: message"."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems[:5]) + (" ..." if len(problems) > 5 else ""))
        self.problems = problems


def _text(record: dict[str, Any], key: str, problems: list[str], where: str) -> str:
    value = record.get(key, "")
    if not isinstance(value, str):
        problems.append(f"{where}: {key}: must be a string")
        return ""
    return value


def _items(data: object, name: str, problems: list[str]) -> dict[str, tuple[int, dict[str, Any]]]:
    """The file's objects by id (with their 1-based position), noting every malformed one."""
    if not isinstance(data, list):
        problems.append(f"{name}: must be a JSON list of objects")
        return {}
    items: dict[str, tuple[int, dict[str, Any]]] = {}
    for number, record in enumerate(data, 1):
        where = f"{name} item {number}"
        if not isinstance(record, dict):
            problems.append(f"{where}: must be an object")
            continue
        pair_id = record.get("id")
        if not isinstance(pair_id, str) or not pair_id:
            problems.append(f"{where}: id: a non-empty string is required")
            continue
        if pair_id in items:
            problems.append(f"{where} ({pair_id}): id: repeats item {items[pair_id][0]}")
            continue
        items[pair_id] = (number, record)
    return items


def _pair_parse(
    blind: dict[str, Any], answer: dict[str, Any], where_b: str, where_a: str, problems: list[str]
) -> ReleasePair | None:
    before = len(problems)
    texts = {key: _text(blind, key, problems, where_b) for key in BLIND_KEYS}
    for key in ("criterion_name", "response_1", "response_2"):
        if key in blind and not texts[key]:
            problems.append(f"{where_b}: {key}: must not be empty")
        elif key not in blind:
            problems.append(f"{where_b}: {key}: missing")
    correct = answer.get("correct_response")
    if correct not in (1, 2) or isinstance(correct, bool):
        problems.append(f"{where_a}: correct_response: must be 1 or 2")
    levels = answer.get("levels")
    if not (
        isinstance(levels, list)
        and len(levels) == 2
        and all(level in LEVELS for level in levels)
        and levels[0] != levels[1]
    ):
        problems.append(f"{where_a}: levels: two different levels of bad, ok, good")
        levels = None
    elif correct in (1, 2):
        better, worse = levels[correct - 1], levels[2 - correct]
        if LEVELS.index(better) < LEVELS.index(worse):
            problems.append(
                f"{where_a}: correct_response: slot {correct} holds {better!r}, the lower level"
            )
    responses = answer.get("responses", ["", ""])
    if not (isinstance(responses, list) and len(responses) == 2):
        problems.append(f"{where_a}: responses: two response ids in slot order")
        responses = ["", ""]
    elif not all(isinstance(r, str) for r in responses) or (
        responses[0] and responses[0] == responses[1]
    ):
        problems.append(f"{where_a}: responses: two different response ids")
    extras = {
        key: _text(answer, key, problems, where_a)
        for key in ("positive_hint", "negative_hint", "group_id", "agent", "task", "domain")
    }
    if len(problems) > before or levels is None or correct not in (1, 2):
        return None
    high = correct - 1
    low = 1 - high
    slots = (texts["response_1"], texts["response_2"])
    return ReleasePair(
        id=texts["id"],
        criterion_name=texts["criterion_name"],
        criterion_description=texts["criterion_description"],
        prompt=texts["prompt"],
        low_text=slots[low],
        high_text=slots[high],
        low_level=levels[low],
        high_level=levels[high],
        agent=extras["agent"],
        group_id=extras["group_id"],
        low_hint=extras["negative_hint"],
        high_hint=extras["positive_hint"],
        task=extras["task"],
        domain=extras["domain"],
        low_response=responses[low],
        high_response=responses[high],
    )


def release_parse(blind: object, answers: object) -> list[ReleasePair]:
    """The pairs of a release (its blind dataset and answers, as parsed JSON), in the blind
    file's order; ReleaseInvalid listing every problem, by file, item and field."""
    problems: list[str] = []
    blind_items = _items(blind, "blind dataset", problems)
    answer_items = _items(answers, "answers", problems)
    for pair_id, (number, _) in blind_items.items():
        if pair_id not in answer_items:
            problems.append(f"blind dataset item {number} ({pair_id}): id: no answer has it")
    for pair_id, (number, _) in answer_items.items():
        if pair_id not in blind_items:
            problems.append(f"answers item {number} ({pair_id}): id: no blind item has it")
    pairs = []
    for pair_id, (number, record) in blind_items.items():
        if pair_id not in answer_items:
            continue
        answer_number, answer = answer_items[pair_id]
        pair = _pair_parse(
            record,
            answer,
            f"blind dataset item {number} ({pair_id})",
            f"answers item {answer_number} ({pair_id})",
            problems,
        )
        if pair is not None:
            pairs.append(pair)
    if problems:
        raise ReleaseInvalid(problems)
    return pairs
