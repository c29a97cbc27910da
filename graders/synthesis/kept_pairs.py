"""A synthesis's kept pairs out and back: as chosen/rejected preference pairs (FORMATS.md
"Export"), and as the PADME release's two files (graders/engine/synthesis/release.py), which
import back as a synthesis of their own through the JSONL importer, all or nothing."""

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.db import transaction

from graders.engine.programs import DocumentInput, ResponseInput, documents_render, response_render
from graders.engine.synthesis.release import (
    ReleaseInvalid,
    ReleasePair,
    release_files,
    release_parse,
)
from labeling.exports import response_text
from labeling.imports import ImportReport, jsonl_import
from labeling.json_input import json_parse
from labeling.jsonl import jsonl_write
from labeling.models import (
    DrawOutcome,
    Project,
    Response,
    Synthesis,
    SynthesisCell,
    SynthesisDraw,
    Task,
)

BLIND_FILE = "eval_dataset.json"
ANSWERS_FILE = "eval_answers.json"
MAX_RELEASE_BYTES = 512 * 1024 * 1024


def kept_draws(*, synthesis: Synthesis) -> Any:
    """The synthesis's kept draws that name their two responses, in cell order."""
    return (
        SynthesisDraw.objects.filter(
            cell__synthesis=synthesis,
            outcome=DrawOutcome.KEPT,
            low_response__isnull=False,
            high_response__isnull=False,
        )
        .select_related("cell__task", "cell__dimension", "low_response", "high_response")
        .prefetch_related("cell__task__documents")
        .order_by("cell__external_id", "retry")
    )


def kept_pairs_records(*, synthesis: Synthesis) -> Iterator[dict[str, Any]]:
    """One chosen/rejected record per kept pair: the higher level is chosen. Confidence is
    None (a constructed label states none); dimension, synthesis and cell say where it came
    from."""
    for draw in kept_draws(synthesis=synthesis).iterator(chunk_size=500):
        cell = draw.cell
        yield {
            "prompt": cell.task.prompt,
            "chosen": response_text(draw.high_response),
            "rejected": response_text(draw.low_response),
            "task": cell.task.external_id,
            "confidence": None,
            "dimension": cell.dimension.name,
            "synthesis": synthesis.external_id,
            "cell": cell.external_id,
        }


def context_render(task: Task) -> str:
    """The shared context a release shows with each pair: the task prompt and its documents.
    A task without documents reads as its prompt alone, so a release imported back (its
    context becomes the prompt) renders the same."""
    documents = tuple(DocumentInput(d.external_id, d.title, d.text) for d in task.documents.all())
    if not documents:
        return task.prompt
    return f"{task.prompt}\n\n{documents_render(documents)}"


def _rendered(response: Response) -> str:
    messages = None if response.messages is None else tuple(response.messages)
    return response_render(ResponseInput(response.external_id, response.content, messages))


def release_pairs(*, synthesis: Synthesis) -> list[ReleasePair]:
    pairs = []
    for draw in kept_draws(synthesis=synthesis):
        cell = draw.cell
        steering = cell.steering if isinstance(cell.steering, dict) else {}
        pairs.append(
            ReleasePair(
                id=cell.external_id,
                criterion_name=cell.dimension.name,
                criterion_description=cell.dimension.description,
                prompt=context_render(cell.task),
                low_text=_rendered(draw.low_response),
                high_text=_rendered(draw.high_response),
                low_level=cell.low_level,
                high_level=cell.high_level,
                agent=cell.agent,
                group_id=f"{cell.task.external_id}/{cell.dimension.name}",
                low_hint=str(steering.get(cell.low_level, "")),
                high_hint=str(steering.get(cell.high_level, "")),
                task=cell.task.external_id,
                domain=cell.task.domain,
                low_response=draw.low_response.external_id,
                high_response=draw.high_response.external_id,
            )
        )
    return pairs


def _release_texts(pairs: list[ReleasePair], seed: int) -> dict[str, str]:
    blind, answers = release_files(pairs, seed=seed)
    return {
        name: json.dumps(data, ensure_ascii=False, indent=1)
        for name, data in ((BLIND_FILE, blind), (ANSWERS_FILE, answers))
    }


def release_documents(*, synthesis: Synthesis, seed: int = 0) -> dict[str, str]:
    """The release's two files as JSON text, by file name. The answers hold steering text:
    they are for admins, never for labelers."""
    return _release_texts(release_pairs(synthesis=synthesis), seed)


def release_export(*, synthesis: Synthesis, directory: Path, seed: int = 0) -> int:
    """Write the blind dataset and the answers of the kept pairs into `directory`; the number
    of pairs."""
    pairs = release_pairs(synthesis=synthesis)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in _release_texts(pairs, seed).items():
        partial = directory / f"{name}.partial"
        partial.write_text(text, encoding="utf-8")
        partial.replace(directory / name)  # never a truncated file under the real name
    return len(pairs)


def _release_read(directory: Path) -> tuple[object, object]:
    loaded = []
    for name in (BLIND_FILE, ANSWERS_FILE):
        path = directory / name
        if not path.is_file():
            raise ReleaseInvalid([f"{name}: not found in {directory}"])
        if path.stat().st_size > MAX_RELEASE_BYTES:
            raise ReleaseInvalid([f"{name}: larger than {MAX_RELEASE_BYTES} bytes"])
        try:
            loaded.append(json_parse(path.read_bytes()))
        except ValueError as exc:
            raise ReleaseInvalid([f"{name}: not JSON ({exc})"]) from None
    return loaded[0], loaded[1]


def _release_records(
    *, project: Project, synthesis_id: str, judges: list[str], pairs: list[ReleasePair]
) -> list[dict[str, Any]]:
    """The JSONL records (FORMATS.md) of a release: its dimensions, tasks and responses where
    the project lacks them (held ones are referenced, never overwritten), one synthesis with
    the given cascade and no retries, and one kept draw per pair (a release holds kept pairs
    only)."""
    held_dimensions = set(project.dimensions.values_list("name", flat=True))
    task_ids = {p.task or p.group_id or p.id for p in pairs}
    held_tasks = set(
        Task.objects.filter(project=project, external_id__in=task_ids).values_list(
            "external_id", flat=True
        )
    )
    response_ids = {p.low_response for p in pairs} | {p.high_response for p in pairs}
    held_responses = set(
        Response.objects.filter(project=project, external_id__in=response_ids).values_list(
            "external_id", flat=True
        )
    )
    records: list[dict[str, Any]] = [
        {"type": "synthesis", "id": synthesis_id, "judges": judges, "retries": 0}
    ]
    emitted: set[tuple[str, str]] = set()

    def once(kind: str, key: str, record: dict[str, Any]) -> None:
        if (kind, key) not in emitted:
            emitted.add((kind, key))
            records.append(record)

    for p in pairs:
        task = p.task or p.group_id or p.id
        if p.criterion_name not in held_dimensions:
            dimension = {"type": "dimension", "name": p.criterion_name,
                         "description": p.criterion_description}  # fmt: skip
            once("dimension", p.criterion_name, dimension)
        if task not in held_tasks:
            once("task", task, {"type": "task", "id": task, "domain": p.domain, "prompt": p.prompt})
        ids = []
        for given, level, text in ((p.low_response, p.low_level, p.low_text),
                                   (p.high_response, p.high_level, p.high_text)):  # fmt: skip
            response = given or f"{p.id}/{level}"
            ids.append(response)
            if response not in held_responses:
                once("response", response, {"type": "response", "id": response, "task": task,
                                            "content": text})  # fmt: skip
        records.append(
            {
                "type": "synthesis_draw",
                "synthesis": synthesis_id,
                "cell": p.id,
                "task": task,
                "dimension": p.criterion_name,
                "levels": [p.low_level, p.high_level],
                "retry": 0,
                "agent": p.agent,
                "responses": ids,
                "votes": [{"judge": judge, "agrees": True} for judge in judges],
            }
        )
    return records


def release_import(
    *, project: Project, directory: Path, synthesis_id: str, judges: list[str]
) -> ImportReport:
    """Import a release (its two files in `directory`) as a new synthesis `synthesis_id` whose
    cascade is `judges`, all or nothing: ReleaseInvalid when the files do not form a release or
    the synthesis exists, ImportRejected (labeling.imports) when a record does not import.
    Each pair's hints become its cell's steering, shown to admins only."""
    if Synthesis.objects.filter(project=project, external_id=synthesis_id).exists():
        raise ReleaseInvalid(
            [f"synthesis {synthesis_id!r} already exists: import a release under a new id"]
        )
    pairs = release_parse(*_release_read(directory))
    records = _release_records(
        project=project, synthesis_id=synthesis_id, judges=judges, pairs=pairs
    )
    with tempfile.TemporaryDirectory(prefix="release-") as folder:
        path = Path(folder) / "release.jsonl"
        with path.open("w", encoding="utf-8") as out:
            jsonl_write(records, out)
        with transaction.atomic():
            report = jsonl_import(project=project, path=path)
            cells = {
                c.external_id: c
                for c in SynthesisCell.objects.filter(
                    synthesis__project=project, synthesis__external_id=synthesis_id
                )
            }
            changed = []
            for p in pairs:
                hints = {p.low_level: p.low_hint, p.high_level: p.high_hint}
                steering = {level: hint for level, hint in hints.items() if hint}
                if steering:
                    cells[p.id].steering = steering
                    changed.append(cells[p.id])
            SynthesisCell.objects.bulk_update(changed, ["steering"])
    return report
