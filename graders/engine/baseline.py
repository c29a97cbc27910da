"""Baseline programs: the plain judges that every searched metagrader must beat.

They are data like any other program, one per kind. The scalar baseline is the field note's
generic judge, its single instruction kept word for word so that comparisons with the seed
experiments stay meaningful; the others are the plainest program of their kind: one comparison,
or one rubric writer with one criterion checker or comparer.
"""

from collections.abc import Mapping
from typing import Any

from graders.engine.programs import Kind, Program, program_validate

GENERIC_JUDGE_INSTRUCTION = (
    "Grade this trace from 0 to 1, where 0 means failure and 1 means full success."
)

_TASK_CONTEXT = (
    "Task:\n{task.prompt}\n\n"
    "Instructions given with the task:\n{task.instructions}\n\n"
    "Source documents:\n{documents}"
)

_RUBRIC_WRITER: Mapping[str, Any] = {
    "id": "rubric",
    "prompt": (
        "Write a grading rubric for the task below. A grader will later check responses "
        "against it one criterion at a time, without any reference answer.\n\n"
        "Write between 3 and 10 criteria. Each names one concrete thing a good response must "
        "contain or do (a fact, a conclusion, a calculation or an action), grounded in the task "
        "and its documents, and can be judged as satisfied or not on its own. Weigh each from "
        "1 (minor) to 10 (essential).\n\n" + _TASK_CONTEXT
    ),
    "output": {"criteria": "list[criterion]"},
}

BASELINE_SCALAR: Mapping[str, Any] = {
    "kind": "scalar",
    "name": "baseline-scalar",
    "description": "The generic judge: one call scores the response from 0 to 1.",
    "steps": [
        {
            "id": "grade",
            "prompt": f"{GENERIC_JUDGE_INSTRUCTION}\n\n{_TASK_CONTEXT}\n\nTrace:\n{{response}}",
            "output": {"score": "float[0,1]"},
        }
    ],
    "reward": "grade.score",
}

BASELINE_PAIRWISE: Mapping[str, Any] = {
    "kind": "pairwise",
    "name": "baseline-pairwise",
    "description": "One call per ordered pair asks which response does the task better.",
    "steps": [
        {
            "id": "compare",
            "prompt": (
                "Two responses to the same task follow. Decide which one accomplishes the task "
                'better. Answer "tie" only if neither is better.\n\n'
                f"{_TASK_CONTEXT}\n\nResponse A:\n{{response_a}}\n\nResponse B:\n{{response_b}}"
            ),
            "output": {"winner": "enum[a,b,tie]"},
        }
    ],
}

BASELINE_RUBRIC: Mapping[str, Any] = {
    "kind": "rubric",
    "name": "baseline-rubric",
    "description": "One call writes a weighted rubric per task; one call checks each criterion.",
    "steps": [
        _RUBRIC_WRITER,
        {
            "id": "check",
            "prompt": (
                "Decide whether the response below satisfies the criterion. It does only if "
                "the response clearly does what the criterion asks; a vague or partial "
                "treatment does not count.\n\n"
                f"{_TASK_CONTEXT}\n\nCriterion:\n{{criterion}}\n\nResponse:\n{{response}}"
            ),
            "output": {"verdict": "bool"},
        },
    ],
}

BASELINE_PAIRWISE_RUBRIC: Mapping[str, Any] = {
    "kind": "pairwise_rubric",
    "name": "baseline-pairwise-rubric",
    "description": "The rubric writer of baseline-rubric, then one comparison per ordered pair.",
    "steps": [
        _RUBRIC_WRITER,
        {
            "id": "compare",
            "prompt": (
                "Two responses to the same task follow, with a weighted rubric written for the "
                "task. Decide which response satisfies the rubric better, counting heavier "
                'criteria for more. Answer "tie" only if neither is better.\n\n'
                f"{_TASK_CONTEXT}\n\nRubric:\n{{rubric}}\n\n"
                "Response A:\n{response_a}\n\nResponse B:\n{response_b}"
            ),
            "output": {"winner": "enum[a,b,tie]"},
        },
    ],
}

BASELINES: Mapping[Kind, Mapping[str, Any]] = {
    "scalar": BASELINE_SCALAR,
    "pairwise": BASELINE_PAIRWISE,
    "rubric": BASELINE_RUBRIC,
    "pairwise_rubric": BASELINE_PAIRWISE_RUBRIC,
}


def baseline_program(kind: Kind) -> Program:
    """The validated baseline program of a kind."""
    return program_validate(BASELINES[kind])
