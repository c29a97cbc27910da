"""The import format's reference as the import page shows it, read off the record models that
validate every line (labeling/records.py), so the page cannot say one thing while the
importer checks another; and the sample file the page offers for download."""

import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labeling.records import AnyRecord

SAMPLE_PATH = Path(__file__).resolve().parent / "demo_data" / "import_sample.jsonl"
SAMPLE_NAME = "workbench-import-sample.jsonl"

# What each record is for, in a line; the fields come from the models.
PURPOSE = {
    "dimension": "A criterion experts compare responses on, besides the overall choice.",
    "task": "What a response answers: the prompt, instructions, source documents and split.",
    "response": "One response to a task: text (content) or a trajectory (messages).",
    "rubric": "Weighted criteria for one task, written by an expert or generated.",
    "criterion_grade": "Whether a response satisfies one rubric criterion.",
    "score": "A score in [0, 1] for one response (a true grader, an expert or a judge).",
    "preference": "Which of two responses to one task is better (a, b or tie), with confidence.",
    "judge_score": "A judge's score for one response, per run, for meta-evaluation.",
    "synthesis": "A PADME synthesis run: the judges it checks and its undrawn cells.",
    "synthesis_draw": "One draw of a synthesis cell: the two responses and the judges' votes.",
}


@dataclass(frozen=True)
class FieldRow:
    name: str
    required: bool
    kind: str
    default: str


@dataclass(frozen=True)
class RecordReference:
    type: str
    purpose: str
    fields: list[FieldRow]


def import_reference() -> list[RecordReference]:
    """Every record type the importer takes, in its order, with each field's kind."""
    models = typing.get_args(typing.get_args(AnyRecord)[0])
    references = []
    for model in models:
        schema = model.model_json_schema()
        record_type = schema["properties"]["type"]["const"]
        required = set(schema.get("required", []))
        rows = [
            FieldRow(
                name=name,
                required=name in required,
                kind=_kind(spec, schema.get("$defs", {})),
                default="" if "default" not in spec else json.dumps(spec["default"]),
            )
            for name, spec in schema["properties"].items()
            if name != "type"
        ]
        references.append(RecordReference(record_type, PURPOSE.get(record_type, ""), rows))
    return references


def _kind(spec: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in spec:
        target = defs.get(spec["$ref"].rsplit("/", 1)[-1], {})
        return "object: " + ", ".join(target.get("properties", {})) if target else "object"
    if "anyOf" in spec:
        options = [option for option in spec["anyOf"] if option.get("type") != "null"]
        kinds = " or ".join(_kind(option, defs) for option in options)
        nullable = len(options) < len(spec["anyOf"])
        return f"{kinds} or null" if nullable else kinds
    if "enum" in spec:
        return "one of " + ", ".join(json.dumps(value) for value in spec["enum"])
    if "const" in spec:
        return json.dumps(spec["const"])
    kind = spec.get("type", "any JSON")
    if kind == "array":
        items = spec.get("items", {})
        return f"list of {_kind(items, defs)}" if items else "list"
    if kind == "string":
        limit = spec.get("maxLength")
        return f"text, up to {limit:,} characters" if limit else "text"
    if kind in ("number", "integer"):
        low = spec.get("minimum", spec.get("exclusiveMinimum"))
        high = spec.get("maximum", spec.get("exclusiveMaximum"))
        if low is not None and high is not None:
            return f"{kind} from {low:g} to {high:g}"
        if low is not None:
            return f"{kind}, at least {low:g}"
        return str(kind)
    if kind == "object":
        return "JSON object"
    return str(kind)
