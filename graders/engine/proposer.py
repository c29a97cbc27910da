"""The structured proposer: new metagrader programs from old ones, when no proposer model is set.

The search (DESIGN.md section 6) needs candidates every round. Without a strong model to write
them, this module makes them by mutation and recombination over a library of building blocks,
each one a grading idea worth trying on a task family:

- requirement extraction: work out what the task demands before judging it;
- verification of a first score: a second call re-checks it against the response;
- an independent re-score from scratch, and the mean, min or weighted mean of the scores;
- rubric size and weighting, and a list of the response's claims to check criteria against;
- for comparisons: ties allowed or a forced choice, and a reminder that order is arbitrary
  (the runtime always compares both orders);
- an analysis written before the decision; the task's documents shown or hidden; a few
  stances on strictness.

A block is a named transformation of a program's JSON that gives a new valid program, or None
when it does not apply. `propose` chains one to three blocks on a parent, or crosses two
parents, drawing every choice from one seeded random.Random so that a round can be replayed
exactly. It is a real search, only a less creative one than a model's.
"""

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from graders.engine.baseline import baseline_program
from graders.engine.programs import (
    CHECK_STEP,
    COMPARE_STEP,
    KINDS,
    PAIRWISE_KINDS,
    PLACEHOLDER,
    RUBRIC_KINDS,
    RUBRIC_STEP,
    TASK_INPUTS,
    WINNER_FIELD,
    Kind,
    NumberType,
    Program,
    ProgramInvalid,
    program_validate,
    spec_parse,
)
from graders.engine.reward import reward_parse, reward_refs

ProgramJson = dict[str, Any]
Transform = Callable[[ProgramJson], ProgramJson | None]

MAX_BLOCKS_PER_MUTATION = 3
CROSSOVER_RATE = 0.25
# Tries per wanted proposal before `propose` gives up and returns fewer: near an exhausted
# neighbourhood most tries land on programs already evaluated.
ATTEMPTS_PER_PROPOSAL = 20
RUBRIC_SIZES = (3, 5, 8, 12)

REQUIREMENTS_STEP, VERIFY_STEP, FRESH_STEP, CLAIMS_STEP = (
    "requirements",
    "verify",
    "fresh",
    "claims",
)
ANALYSIS_FIELD = "analysis"
TASK_PLACEHOLDERS = ("task.prompt", "task.instructions")
RESPONSE_PLACEHOLDERS = ("response", "response_a", "response_b")

# The same section the baselines use, so that dropping and re-including documents round-trips.
DOCUMENTS_SECTION = "Source documents:\n{documents}"
REQUIREMENTS_INSTRUCTION = (
    "Work out the core requirements of the task below: what a response must contain or do to "
    "succeed, taken from the task, its instructions and any documents. Write each as one short "
    "statement that can be checked on its own."
)
SCORE_REQUIREMENTS = (
    " Then score how well the response meets them, from 0 (meets none) to 1 (meets all)."
)
VERIFY_INSTRUCTION = (
    "An earlier grader judged the response below and recorded what follows. Check its work: "
    "confirm each point it relied on against the response, look for anything it missed, and "
    "give your own score from 0 (failure) to 1 (full success)."
)
FRESH_INSTRUCTION = (
    "Judge the response below on its own, from scratch: how well does it accomplish the task? "
    "Score it from 0 (failure) to 1 (full success)."
)
CLAIMS_INSTRUCTIONS: Mapping[Kind, str] = {
    "rubric": (
        "List every claim the response below makes and every action it takes, one per item, as "
        "close to its own words as you can. Do not judge them."
    ),
    "pairwise_rubric": (
        "For each of the two responses below, list every claim it makes and every action it "
        "takes, one per item, as close to its own words as you can. Do not judge them."
    ),
}
CLAIMS_SECTIONS: Mapping[Kind, str] = {
    "rubric": "Claims and actions listed from the response:\n{claims.claims}",
    "pairwise_rubric": (
        "Claims and actions listed from response A:\n{claims.claims_a}\n\n"
        "Claims and actions listed from response B:\n{claims.claims_b}"
    ),
}
CLAIMS_OUTPUTS: Mapping[Kind, Mapping[str, str]] = {
    "rubric": {"claims": "list[str]"},
    "pairwise_rubric": {"claims_a": "list[str]", "claims_b": "list[str]"},
}
RESPONSES_SHOWN: Mapping[Kind, str] = {
    "scalar": "Response:\n{response}",
    "pairwise": "Response A:\n{response_a}\n\nResponse B:\n{response_b}",
    "rubric": "Response:\n{response}",
    "pairwise_rubric": "Response A:\n{response_a}\n\nResponse B:\n{response_b}",
}
REQUIREMENTS_SECTION = (
    "Core requirements of the task, worked out beforehand:\n{requirements.requirements}"
)

# Stances are exclusive: setting one removes the others, so the judge never reads two.
STANCES: Mapping[str, str] = {
    "strict": (
        "Be strict: credit only what the response does correctly and completely; a "
        "plausible but unsupported claim earns nothing."
    ),
    "partial_credit": (
        "Credit partial success: count each part of the task the response gets right, even "
        "when other parts are missing."
    ),
    "errors_count": (
        "Weigh errors heavily: one wrong fact, figure or action can outweigh several correct ones."
    ),
    "substance_over_style": (
        "Judge substance, not style: ignore length, tone and formatting unless the task asks "
        "for them."
    ),
}
ANALYSIS_SENTENCES: Mapping[Kind, str] = {
    "scalar": (
        "Before scoring, write a short analysis of what the task needs and where the response "
        "meets or misses it."
    ),
    "pairwise": (
        "Before naming the winner, write a short analysis of how the two responses differ on "
        "what the task needs."
    ),
    "rubric": (
        "Before the verdict, write a short analysis of what in the response bears on the criterion."
    ),
    "pairwise_rubric": (
        "Before naming the winner, write a short analysis of how the two responses differ on "
        "the rubric's heavier criteria."
    ),
}
# The first is the baselines' own sentence, so allow_tie on a baseline changes nothing.
TIE_ALLOWED = 'Answer "tie" only if neither is better.'
TIE_FORBIDDEN = "There is no tie: choose the better one even when they are close."
POSITION_NEUTRAL = (
    "The order of the two responses is arbitrary, and the pair is also shown the other way "
    "round, so do not favour either position."
)
# The second is the baseline rubric writer's own sentence.
WEIGHTINGS: Mapping[str, str] = {
    "uniform": "Give every criterion the weight 1.",
    "importance": "Weigh each from 1 (minor) to 10 (essential).",
}
CRITERIA_COUNT = re.compile(r"Write (?:between \d+ and \d+|\d+) criteria\.")


# The library ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A building block: the grading idea it tries, the kinds it applies to, and its
    transformation. `transform` receives a private copy of a normalized program and may edit
    it in place; it returns the edited program, or None when the block does not apply.

    Blocks of one `family` are alternatives (two stances, two reward combinations): one
    mutation applies at most one of them, so it never undoes or overrides its own move."""

    name: str
    kinds: tuple[Kind, ...]
    idea: str
    transform: Transform
    family: str | None = None

    def apply(self, program: Mapping[str, Any]) -> ProgramJson | None:
        """A new program with this block applied, validated and normalized; None when the block
        does not apply: another kind, nothing would change, or a result the validator refuses.
        The last happens only near the step limit or on a hand-written parent whose shape the
        block cannot anticipate, so such parents cost a try instead of crashing a search."""
        parsed = program_validate(program)
        if parsed.kind not in self.kinds:
            return None
        changed = self.transform(parsed.to_json())
        if changed is None:
            return None
        try:
            result = program_validate(changed).to_json()
        except ProgramInvalid:
            return None
        return None if result == parsed.to_json() else result


# Prompt editing. Prompts are read as paragraphs separated by blank lines: the baselines and
# every block put each labelled input in a paragraph of its own, which is what makes a section
# insertable and removable without parsing prose.


def _placeholders(text: str) -> list[str]:
    return PLACEHOLDER.findall(text)


def _section_insert(prompt: str, section: str, anchors: Iterable[str]) -> str:
    """Insert a section after the last paragraph that shows one of `anchors`, or at the end."""
    paragraphs = prompt.split("\n\n")
    wanted = set(anchors)
    shown = [i for i, paragraph in enumerate(paragraphs) if wanted & set(_placeholders(paragraph))]
    paragraphs.insert(shown[-1] + 1 if shown else len(paragraphs), section)
    return "\n\n".join(paragraphs)


def _documents_remove(prompt: str) -> str:
    """Drop the paragraphs that only show the documents, and the placeholder from any other."""
    kept = []
    for paragraph in prompt.split("\n\n"):
        names = set(_placeholders(paragraph))
        if names == {"documents"}:
            continue
        if "documents" in names:
            paragraph = PLACEHOLDER.sub(
                lambda match: "" if match.group(1) == "documents" else match.group(0), paragraph
            )
        kept.append(paragraph)
    return "\n\n".join(kept)


def _sentence_add(prompt: str, sentence: str) -> str:
    """Append a sentence to the first paragraph of pure instruction (one with no placeholder),
    or open the prompt with it; never next to fenced data, where it would read as part of it."""
    paragraphs = prompt.split("\n\n")
    for index, paragraph in enumerate(paragraphs):
        if paragraph.strip() and not PLACEHOLDER.search(paragraph):
            paragraphs[index] = f"{paragraph.rstrip()} {sentence}"
            return "\n\n".join(paragraphs)
    return f"{sentence}\n\n{prompt}"


def _sentence_remove(prompt: str, sentence: str) -> str:
    paragraphs = []
    for paragraph in prompt.split("\n\n"):
        if sentence in paragraph:
            paragraph = paragraph.replace(f" {sentence}", "").replace(sentence, "").strip()
            if not paragraph:
                continue
        paragraphs.append(paragraph)
    return "\n\n".join(paragraphs)


def _sentence_choose(prompt: str, sentence: str, family: Sequence[str]) -> str:
    """Set one sentence of a family of exclusive alternatives. It takes the place of the first
    alternative present, so that switching back restores the prompt exactly."""
    present = [other for other in family if other in prompt and other != sentence]
    if sentence not in prompt and present:
        prompt = prompt.replace(present.pop(0), sentence, 1)
    elif sentence not in prompt:
        prompt = _sentence_add(prompt, sentence)
    for other in present:
        prompt = _sentence_remove(prompt, other)
    return prompt


def _task_context(with_documents: bool) -> str:
    sections = ["Task:\n{task.prompt}", "Instructions given with the task:\n{task.instructions}"]
    return "\n\n".join([*sections, DOCUMENTS_SECTION] if with_documents else sections)


# Program inspection.


def _step_find(program: ProgramJson, step_id: str) -> dict[str, Any] | None:
    return next((step for step in program["steps"] if step["id"] == step_id), None)


def _step_position(program: ProgramJson, step_id: str) -> int:
    return [step["id"] for step in program["steps"]].index(step_id)


def _steps_read(step: Mapping[str, Any]) -> set[str]:
    """The ids of the earlier steps whose outputs this step's prompt reads."""
    sources = {name.partition(".")[0] for name in _placeholders(step["prompt"]) if "." in name}
    return sources - {"task"}


def _number_fields(step: Mapping[str, Any]) -> list[str]:
    return [
        name for name, spec in step["output"].items() if isinstance(spec_parse(spec), NumberType)
    ]


def _uses_documents(program: ProgramJson) -> bool:
    """Whether the program shows documents anywhere; new steps follow its choice."""
    return any("documents" in _placeholders(step["prompt"]) for step in program["steps"])


def _deciding_steps(program: ProgramJson) -> list[dict[str, Any]]:
    """The steps whose output becomes the grade: every scoring step of a scalar program, the
    check of a rubric program, the comparison of a pairwise one."""
    if program["kind"] == "scalar":
        return [step for step in program["steps"] if _number_fields(step)]
    role = CHECK_STEP if program["kind"] == "rubric" else COMPARE_STEP
    return [step for step in program["steps"] if step["id"] == role]


def _reward_terms(program: ProgramJson) -> set[str]:
    return {str(ref) for _, ref in reward_refs(reward_parse(program["reward"]))}


def _reward_add(reward: Any, ref: str) -> Any:
    """The reward with one more score averaged in, keeping a flat combination flat."""
    if isinstance(reward, dict) and len(reward) == 1:
        [(op, args)] = reward.items()
        if op in ("mean", "min", "max"):
            return {op: [*args, ref]}
        if op == "weighted_mean":
            return {op: [*args, [ref, 1]]}
    return {"mean": [reward, ref]}


def _reward_replace(reward: Any, old: str, new: str) -> Any:
    if reward == old:
        return new
    if isinstance(reward, list):
        return [_reward_replace(item, old, new) for item in reward]
    if isinstance(reward, dict):
        return {op: _reward_replace(args, old, new) for op, args in reward.items()}
    return reward


def _final_scores(program: ProgramJson) -> list[tuple[str, bool]]:
    """Each number output that no later step reads, with whether its step verifies an earlier
    one. A score a later step re-checks is superseded by that check, so it is not final."""
    steps = program["steps"]
    scores: list[tuple[str, bool]] = []
    for index, step in enumerate(steps):
        if any(step["id"] in _steps_read(later) for later in steps[index + 1 :]):
            continue
        verifies = bool(_steps_read(step))
        scores.extend((f"{step['id']}.{name}", verifies) for name in _number_fields(step))
    return scores


# Blocks for every kind.


def _requirements_add(program: ProgramJson) -> ProgramJson | None:
    """Scalar: a first step lists the requirements and scores the response against them.
    Otherwise the list is made without seeing any response and handed to the step that writes
    the rubric or compares, so a rubric stays a function of the task alone."""
    if _step_find(program, REQUIREMENTS_STEP) is not None:
        return None
    kind = program["kind"]
    context = _task_context(_uses_documents(program))
    if kind == "scalar":
        prompt = f"{REQUIREMENTS_INSTRUCTION}{SCORE_REQUIREMENTS}\n\n{context}\n\n"
        prompt += RESPONSES_SHOWN[kind]
        output = {"requirements": "list[str]", "score": "float[0,1]"}
        program["reward"] = _reward_add(program["reward"], f"{REQUIREMENTS_STEP}.score")
    else:
        reader = _step_find(program, RUBRIC_STEP if kind in RUBRIC_KINDS else COMPARE_STEP)
        if reader is None:
            return None
        reader["prompt"] = _section_insert(reader["prompt"], REQUIREMENTS_SECTION, TASK_INPUTS)
        prompt = f"{REQUIREMENTS_INSTRUCTION}\n\n{context}"
        output = {"requirements": "list[str]"}
    program["steps"].insert(0, {"id": REQUIREMENTS_STEP, "prompt": prompt, "output": output})
    return program


def _documents_include(program: ProgramJson) -> ProgramJson:
    for step in program["steps"]:
        if "documents" not in _placeholders(step["prompt"]):
            step["prompt"] = _section_insert(step["prompt"], DOCUMENTS_SECTION, TASK_PLACEHOLDERS)
    return program


def _documents_drop(program: ProgramJson) -> ProgramJson:
    for step in program["steps"]:
        step["prompt"] = _documents_remove(step["prompt"])
    return program


def _stance_set(program: ProgramJson, sentence: str) -> ProgramJson:
    for step in _deciding_steps(program):
        step["prompt"] = _sentence_choose(step["prompt"], sentence, list(STANCES.values()))
    return program


def _analysis_first(program: ProgramJson) -> ProgramJson:
    """Put a free-text analysis field before the decision: a judge writes fields in order, so
    its decision then follows from reasons instead of preceding them."""
    for step in _deciding_steps(program):
        if ANALYSIS_FIELD not in step["output"]:
            step["output"] = {ANALYSIS_FIELD: "str", **step["output"]}
            step["prompt"] = _sentence_add(step["prompt"], ANALYSIS_SENTENCES[program["kind"]])
    return program


# Blocks for scalar programs.


def _verify_add(program: ProgramJson) -> ProgramJson | None:
    """Re-check the first score: the check reads every output of the first scoring step, and
    takes that score's place in the reward."""
    if _step_find(program, VERIFY_STEP) is not None:
        return None
    first = next((step for step in program["steps"] if _number_fields(step)), None)
    if first is None:
        return None
    earlier = "\n\n".join(
        f"The earlier grader's {name}:\n{{{first['id']}.{name}}}" for name in first["output"]
    )
    context = _task_context(_uses_documents(program))
    # The task first and what differs per response last, so a task's prompts share an opening
    # that servers with prompt-prefix caches reuse.
    prompt = f"{VERIFY_INSTRUCTION}\n\n{context}\n\n{earlier}\n\n{RESPONSES_SHOWN['scalar']}"
    verify = {"id": VERIFY_STEP, "prompt": prompt, "output": {"score": "float[0,1]"}}
    program["steps"].insert(_step_position(program, first["id"]) + 1, verify)
    checked, replacement = f"{first['id']}.{_number_fields(first)[0]}", f"{VERIFY_STEP}.score"
    reward = program["reward"]
    if checked in _reward_terms(program):
        program["reward"] = _reward_replace(reward, checked, replacement)
    else:
        program["reward"] = _reward_add(reward, replacement)
    return program


def _fresh_add(program: ProgramJson) -> ProgramJson | None:
    """An independent score, which sees no earlier output, averaged into the reward."""
    if _step_find(program, FRESH_STEP) is not None:
        return None
    context = _task_context(_uses_documents(program))
    prompt = f"{FRESH_INSTRUCTION}\n\n{context}\n\n{RESPONSES_SHOWN['scalar']}"
    program["steps"].append({"id": FRESH_STEP, "prompt": prompt, "output": {"score": "float[0,1]"}})
    program["reward"] = _reward_add(program["reward"], f"{FRESH_STEP}.score")
    return program


def _reward_combine(program: ProgramJson, op: Literal["mean", "min"]) -> ProgramJson | None:
    refs = [ref for ref, _ in _final_scores(program)]
    if len(refs) < 2:
        return None
    program["reward"] = {op: refs}
    return program


def _reward_weighted(program: ProgramJson) -> ProgramJson | None:
    """Verifications count double: they saw the response and an earlier judgement of it."""
    terms = [[ref, 2 if verifies else 1] for ref, verifies in _final_scores(program)]
    if len({weight for _, weight in terms}) < 2:
        return None
    program["reward"] = {"weighted_mean": terms}
    return program


# Blocks for pairwise kinds.


def _ties_set(program: ProgramJson, allowed: bool) -> ProgramJson | None:
    compare = _step_find(program, COMPARE_STEP)
    if compare is None:
        return None
    compare["output"][WINNER_FIELD] = "enum[a,b,tie]" if allowed else "enum[a,b]"
    sentence = TIE_ALLOWED if allowed else TIE_FORBIDDEN
    compare["prompt"] = _sentence_choose(compare["prompt"], sentence, (TIE_ALLOWED, TIE_FORBIDDEN))
    return program


def _position_neutral(program: ProgramJson) -> ProgramJson | None:
    compare = _step_find(program, COMPARE_STEP)
    if compare is None:
        return None
    compare["prompt"] = _sentence_choose(compare["prompt"], POSITION_NEUTRAL, ())
    return program


# Blocks for rubric kinds.


def _rubric_size_set(program: ProgramJson, size: int) -> ProgramJson | None:
    rubric = _step_find(program, RUBRIC_STEP)
    if rubric is None:
        return None
    sentence = f"Write {size} criteria."
    if CRITERIA_COUNT.search(rubric["prompt"]):
        rubric["prompt"] = CRITERIA_COUNT.sub(sentence, rubric["prompt"], count=1)
    else:
        rubric["prompt"] = _sentence_add(rubric["prompt"], sentence)
    return program


def _weighting_set(program: ProgramJson, sentence: str) -> ProgramJson | None:
    rubric = _step_find(program, RUBRIC_STEP)
    if rubric is None:
        return None
    rubric["prompt"] = _sentence_choose(rubric["prompt"], sentence, list(WEIGHTINGS.values()))
    return program


def _claims_add(program: ProgramJson) -> ProgramJson | None:
    """List the response's claims once, after the rubric, for the grading step to read: each
    criterion is then checked against an explicit list rather than a re-reading of the whole."""
    kind = program["kind"]
    reader = _step_find(program, CHECK_STEP if kind == "rubric" else COMPARE_STEP)
    if reader is None or _step_find(program, CLAIMS_STEP) is not None:
        return None
    prompt = f"{CLAIMS_INSTRUCTIONS[kind]}\n\n{_task_context(False)}\n\n{RESPONSES_SHOWN[kind]}"
    claims = {"id": CLAIMS_STEP, "prompt": prompt, "output": dict(CLAIMS_OUTPUTS[kind])}
    program["steps"].insert(_step_position(program, RUBRIC_STEP) + 1, claims)
    reader["prompt"] = _section_insert(
        reader["prompt"], CLAIMS_SECTIONS[kind], RESPONSE_PLACEHOLDERS
    )
    return program


BLOCKS: tuple[Block, ...] = (
    Block(
        "add_requirements_step",
        KINDS,
        "Work out the task's core requirements first, so that judging checks them one by one "
        "instead of forming a blanket impression.",
        _requirements_add,
    ),
    Block(
        "add_verify_step",
        ("scalar",),
        "A second call re-checks the first score against the response; the field note's best "
        "scalar grader did this.",
        _verify_add,
    ),
    Block(
        "add_fresh_rescore",
        ("scalar",),
        "An independent score from scratch, blind to the first, whose errors partly cancel "
        "the first one's when averaged.",
        _fresh_add,
    ),
    Block(
        "reward_mean",
        ("scalar",),
        "Average the final scores (those no later step re-checks).",
        partial(_reward_combine, op="mean"),
        family="reward",
    ),
    Block(
        "reward_min",
        ("scalar",),
        "Take the lowest final score: a response is only as good as its weakest check.",
        partial(_reward_combine, op="min"),
        family="reward",
    ),
    Block(
        "reward_weighted",
        ("scalar",),
        "Weighted mean of the final scores, verifications counting double.",
        _reward_weighted,
        family="reward",
    ),
    Block(
        "include_documents",
        KINDS,
        "Show the task's documents to every step, so that claims can be checked against them.",
        _documents_include,
        family="documents",
    ),
    Block(
        "drop_documents",
        KINDS,
        "Hide the documents: shorter prompts, for judges that lose focus in long contexts.",
        _documents_drop,
        family="documents",
    ),
    *(
        Block(
            f"wording_{name}",
            KINDS,
            f"Tell the deciding steps: {sentence}",
            partial(_stance_set, sentence=sentence),
            family="wording",
        )
        for name, sentence in STANCES.items()
    ),
    Block(
        "reason_first",
        KINDS,
        "A short analysis field before the decision, so that the decision follows from reasons.",
        _analysis_first,
    ),
    Block(
        "allow_tie",
        PAIRWISE_KINDS,
        "Let the judge call a tie when neither response is better.",
        partial(_ties_set, allowed=True),
        family="ties",
    ),
    Block(
        "forced_choice",
        PAIRWISE_KINDS,
        "No ties: a close pair still yields a preference, which ranking accuracy rewards.",
        partial(_ties_set, allowed=False),
        family="ties",
    ),
    Block(
        "position_neutral",
        PAIRWISE_KINDS,
        "Remind the judge that the order is arbitrary; the runtime compares both orders anyway.",
        _position_neutral,
    ),
    Block(
        "add_claims_step",
        RUBRIC_KINDS,
        "List the response's claims and actions once, then judge the rubric against the list.",
        _claims_add,
    ),
    *(
        Block(
            f"rubric_size_{size}",
            RUBRIC_KINDS,
            f"Ask for {size} criteria: fewer are coarser, more check finer requirements.",
            partial(_rubric_size_set, size=size),
            family="rubric_size",
        )
        for size in RUBRIC_SIZES
    ),
    Block(
        "rubric_uniform_weights",
        RUBRIC_KINDS,
        "Every criterion weighs the same, when importance judgements are noisy.",
        partial(_weighting_set, sentence=WEIGHTINGS["uniform"]),
        family="rubric_weights",
    ),
    Block(
        "rubric_importance_weights",
        RUBRIC_KINDS,
        "Criteria weighted from 1 (minor) to 10 (essential).",
        partial(_weighting_set, sentence=WEIGHTINGS["importance"]),
        family="rubric_weights",
    ),
)
BLOCKS_BY_NAME: Mapping[str, Block] = {block.name: block for block in BLOCKS}


def blocks_for_kind(kind: Kind) -> tuple[Block, ...]:
    """The blocks that can apply to programs of a kind, in library order."""
    return tuple(block for block in BLOCKS if kind in block.kinds)


# Recombination -------------------------------------------------------------------------------


def program_crossover(
    first: Mapping[str, Any], second: Mapping[str, Any], *, rng: random.Random
) -> ProgramJson | None:
    """A child of two programs of one kind, or None when it would not be valid.

    Each step both parents have comes from one or the other by a coin toss; a step only the
    second has goes before the next step they share. A scalar child averages every term of
    both parents' rewards, an ensemble of the two. Then only the steps something still needs
    are kept: those the reward reads (scalar) or the kind's role steps, and what those read.
    The child keeps the first parent's name; `propose` gives it its own.
    """
    a, b = program_validate(first).to_json(), program_validate(second).to_json()
    if a["kind"] != b["kind"]:
        raise ValueError(f"cannot cross a {a['kind']} program with a {b['kind']} one")
    child: ProgramJson = {key: a[key] for key in ("kind", "name", "description")}
    steps = _steps_merge(a["steps"], b["steps"], rng)
    if a["kind"] == "scalar":
        child["reward"] = _rewards_union(a["reward"], b["reward"])
        roots = {ref.partition(".")[0] for ref in _reward_terms(child)}
    else:
        roots = {RUBRIC_STEP, CHECK_STEP, COMPARE_STEP}
    child["steps"] = _steps_needed(steps, roots)
    try:
        return program_validate(child).to_json()
    except ProgramInvalid:
        return None


def _steps_merge(
    first: list[dict[str, Any]], second: list[dict[str, Any]], rng: random.Random
) -> list[dict[str, Any]]:
    by_id = {step["id"]: step for step in second}
    merged = [
        by_id[step["id"]] if step["id"] in by_id and rng.random() < 0.5 else step for step in first
    ]
    in_first = {step["id"] for step in first}
    pending: list[dict[str, Any]] = []
    for step in second:
        if step["id"] not in in_first:
            pending.append(step)
            continue
        at = [kept["id"] for kept in merged].index(step["id"])
        merged[at:at] = pending
        pending = []
    return merged + pending


def _rewards_union(first: Any, second: Any) -> Any:
    terms: list[Any] = []
    for reward in (first, second):
        is_mean = isinstance(reward, dict) and list(reward) == ["mean"]
        for term in reward["mean"] if is_mean else [reward]:
            if term not in terms:
                terms.append(term)
    return terms[0] if len(terms) == 1 else {"mean": terms}


def _steps_needed(steps: list[dict[str, Any]], roots: set[str]) -> list[dict[str, Any]]:
    needed = set(roots)
    for step in reversed(steps):
        if step["id"] in needed:
            needed |= _steps_read(step)
    return [step for step in steps if step["id"] in needed]


# Proposals -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    """A new program and where it came from. `lineage` reads like
    "baseline-scalar + include_documents + add_verify_step", or "crossover of X and Y"."""

    program: ProgramJson
    parents: tuple[str, ...]
    lineage: str
    blocks: tuple[str, ...]
    content_hash: str
    fingerprint: str


def program_fingerprint(program: Mapping[str, Any]) -> str:
    """sha256 of what a program does (kind, steps, reward), leaving out its name and
    description: two programs reached by different lineages grade identically when their
    fingerprints match, though their content hashes differ."""
    return _fingerprint(program_validate(program))


def _fingerprint(program: Program) -> str:
    document = program.to_json()
    del document["name"], document["description"]
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def propose(
    parents: Sequence[Mapping[str, Any]],
    *,
    kind: Kind,
    n: int,
    seed: int,
    history: Iterable[str] = (),
) -> list[Proposal]:
    """Up to n new programs of `kind`, made from `parents` (the kind's baseline when empty).

    Each try either crosses two distinct parents (with probability CROSSOVER_RATE, when there
    are two) or picks a parent uniformly and applies one to three applicable blocks in turn.
    A result is skipped when its content hash or fingerprint is in `history`, belongs to a
    parent or repeats one already proposed; pass fingerprints in `history` to also skip
    programs evaluated under another name. After ATTEMPTS_PER_PROPOSAL * n tries the
    proposals found so far are returned, possibly fewer than n: a neighbourhood can run dry.

    Deterministic: the same parents, kind, n, seed and history give the same proposals.
    Raises ProgramInvalid for an invalid parent and ValueError for one of another kind.
    """
    rng = random.Random(seed)
    pool = _parents_load(parents, kind)
    seen = set(history)
    for parent in pool:
        seen |= {parent.content_hash, _fingerprint(parent)}
    proposals: list[Proposal] = []
    for _ in range(n * ATTEMPTS_PER_PROPOSAL):
        if len(proposals) >= n:
            break
        crossing = len(pool) > 1 and rng.random() < CROSSOVER_RATE
        offspring = _crossover_try(pool, rng) if crossing else _mutation_try(pool, kind, rng)
        if offspring is None:
            continue
        proposal = _proposal_make(*offspring)
        if {proposal.content_hash, proposal.fingerprint} & seen:
            continue
        seen |= {proposal.content_hash, proposal.fingerprint}
        proposals.append(proposal)
    return proposals


# A new program, its parents, its lineage and the blocks applied.
Offspring = tuple[ProgramJson, tuple[Program, ...], str, tuple[str, ...]]


def _parents_load(parents: Sequence[Mapping[str, Any]], kind: Kind) -> list[Program]:
    """Validated parents, one per fingerprint, in the order given."""
    programs = [program_validate(parent) for parent in parents] or [baseline_program(kind)]
    strangers = [program.name for program in programs if program.kind != kind]
    if strangers:
        raise ValueError(f"parents must be {kind} programs; not: {', '.join(strangers)}")
    unique: dict[str, Program] = {}
    for program in programs:
        unique.setdefault(_fingerprint(program), program)
    return list(unique.values())


def _mutation_try(pool: list[Program], kind: Kind, rng: random.Random) -> Offspring | None:
    parent = rng.choice(pool)
    program = parent.to_json()
    applied: list[str] = []
    for _ in range(rng.randint(1, MAX_BLOCKS_PER_MUTATION)):
        used = {BLOCKS_BY_NAME[name].family for name in applied} - {None}
        candidates = [block for block in blocks_for_kind(kind) if block.family not in used]
        rng.shuffle(candidates)
        found = _first_applicable(candidates, program)
        if found is None:
            break
        block, program = found
        applied.append(block.name)
    if not applied:
        return None
    return program, (parent,), " + ".join([parent.name, *applied]), tuple(applied)


def _first_applicable(
    blocks: Iterable[Block], program: ProgramJson
) -> tuple[Block, ProgramJson] | None:
    for block in blocks:
        result = block.apply(program)
        if result is not None:
            return block, result
    return None


def _crossover_try(pool: list[Program], rng: random.Random) -> Offspring | None:
    first, second = rng.sample(pool, 2)
    child = program_crossover(first.to_json(), second.to_json(), rng=rng)
    if child is None:
        return None
    return child, (first, second), f"crossover of {first.name} and {second.name}", ("crossover",)


def _proposal_make(
    program: ProgramJson, parents: tuple[Program, ...], lineage: str, blocks: tuple[str, ...]
) -> Proposal:
    """Name the program after its kind, its steps and its fingerprint, which together say what
    it is and keep names unique; record the lineage in its description."""
    fingerprint = program_fingerprint(program)
    step_ids = "-".join(step["id"] for step in program["steps"])
    named = program_validate(
        program
        | {
            "name": f"{program['kind'].replace('_', '-')}-{step_ids}-{fingerprint[:8]}",
            "description": f"Made by the structured proposer: {lineage}.",
        }
    )
    return Proposal(
        program=named.to_json(),
        parents=tuple(parent.content_hash for parent in parents),
        lineage=lineage,
        blocks=blocks,
        content_hash=named.content_hash,
        fingerprint=fingerprint,
    )
