"""Every schema the workbench sends a judge is closed ("additionalProperties": false on every
object, jsonout.wire_schema). Kept apart from test_jsonout.py, which also runs against the
runtime wheel: the audit, the baselines and synthesis are not part of the runtime."""

from graders.engine.audit import AUDIT_SCHEMA
from graders.engine.baseline import baseline_program
from graders.engine.jsonout import wire_schema
from graders.engine.synthesis.evaluator import EVALUATOR_SCHEMA
from graders.engine.synthesis.prompts import FILTER_SCHEMA, STEER_SCHEMA


def _objects(node: object) -> list[dict[str, object]]:
    if isinstance(node, list):
        return [found for item in node for found in _objects(item)]
    if not isinstance(node, dict):
        return []
    here = [node] if node.get("type") == "object" or "properties" in node else []
    return here + [found for value in node.values() for found in _objects(value)]


def test_every_schema_we_send_a_judge_is_closed() -> None:
    """The baselines of every kind, the audit, the synthesis steps and evaluator: llama.cpp's
    grammar lets a model add keys until max_tokens unless each object is closed."""
    schemas = [AUDIT_SCHEMA, EVALUATOR_SCHEMA, FILTER_SCHEMA, STEER_SCHEMA]
    for kind in ("scalar", "pairwise", "rubric", "pairwise_rubric"):
        schemas += [step.schema() for step in baseline_program(kind).steps]
    for schema in schemas:
        objects = _objects(wire_schema(schema))
        assert objects and all(node.get("additionalProperties") is False for node in objects)
