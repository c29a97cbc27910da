"""The copy-paste examples of docs/trainers.md run as written against an exported bundle and
the fake judge, so a renamed function or argument breaks a test before it breaks a user's
training job. Blocks that need a trainer's own packages (TRL, datasets, pandas) are compiled
only: those packages are not ours to install here."""

import ast
import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from graders.engine.runtime import load_bundle
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.engine.test_runtime import (
    LEASE,
    PAIRWISE,
    SCALAR,
    bundle_dict,
    quality_judge,
    reference_rewards,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "trainers.md"
TRAINER_PACKAGES = {"datasets", "trl", "pandas"}


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def imports(code: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def block(marker: str) -> str:
    """The one python block of the guide that contains `marker`."""
    found = [code for code in python_blocks() if marker in code]
    assert len(found) == 1, f"{len(found)} python blocks of {DOC.name} contain {marker!r}"
    return found[0]


@pytest.fixture
def bundle_in(tmp_path: Path, fake_judge: FakeJudgeServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An exported scalar bundle as grader-bundle.json in the working directory, which is
    tmp_path; the guide's absolute paths are pointed there too."""
    fake_judge.responder = quality_judge
    (tmp_path / "grader-bundle.json").write_text(
        json.dumps(bundle_dict(SCALAR, fake_judge.base_url))
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(code: str, folder: Path) -> dict[str, Any]:
    code = re.sub(r'"/(shared|tmp)/', f'"{folder}/', code)  # the guide's absolute paths
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(code, str(DOC), "exec"), namespace)  # our own documentation, not input
    return namespace


def test_every_python_block_compiles_and_the_trainer_free_ones_import_only_the_runtime() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 7
    for code in blocks:
        names = imports(code)  # parses, so a syntax error fails here
        assert names - TRAINER_PACKAGES - {"os", "asyncio", "graders"} == set(), names
        # A training job installs the runtime without Django: examples import only the engine.
        modules = set(re.findall(r"from (graders\.[\w.]+) import", code))
        assert modules <= {"graders.engine.runtime", "graders.engine.programs"}, modules


def test_the_bundle_check_prints_each_response_s_reward_and_the_usage(
    bundle_in: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace = run(block("print(grader.usage.as_dict())"), bundle_in)
    namespace["grader"].close()

    printed = capsys.readouterr().out.splitlines()
    grader_line = printed[0]
    assert grader_line.startswith("<Grader 'Quality Score' (scalar)")
    assert grader_line.endswith("> 1 tasks")
    # Neither example response has a quality word the fake judge scores by: both get 0.0.
    assert printed[1:3] == ["a 0.0 None", "b 0.0 None"]
    assert "'calls': 2" in printed[3]


def test_verl_reward_file_scores_one_response_by_task_id(bundle_in: Path) -> None:
    # verl's own reward loop runs both reward files in tests/trainers/test_verl.py.
    namespace = run(block("verl_compute_score_async(_grader, failure_reward"), bundle_in)
    compute_score, grader = namespace["compute_score"], namespace["_grader"]

    async def like_verl() -> list[Any]:
        try:
            return [
                await compute_score(
                    data_source="workbench",
                    solution_str=text,
                    ground_truth="",
                    extra_info={"task_id": "lease"},
                )
                for text in ("An excellent answer: 60 days notice.", "A poor answer.")
            ]
        finally:
            await grader.aclose()

    assert asyncio.run(like_verl()) == [
        {"score": 1.0, "grader_failed": 0.0},
        {"score": 0.25, "grader_failed": 0.0},
    ]


def test_openrlhf_reward_file_gathers_a_prompts_samples_for_pairwise(
    bundle_in: Path, fake_judge: FakeJudgeServer
) -> None:
    """Called as OpenRLHF calls it: one sample per call, a prompt's samples from threads."""
    (bundle_in / "grader-bundle.json").write_text(
        json.dumps(bundle_dict(PAIRWISE, fake_judge.base_url))
    )
    namespace = run(block("openrlhf_reward_func("), bundle_in)
    prompt = f"<|im_start|>user\n{LEASE}<|im_end|>\n<|im_start|>assistant\n"
    words = ["excellent", "good", "fair", "poor"] * 2  # group_size=8 in the guide
    answers = [f"A {word} answer.<|im_end|>" for word in words]
    with ThreadPoolExecutor(len(answers)) as pool:
        results = list(
            pool.map(lambda a: namespace["reward_func"]([prompt + a], [prompt], ["lease"]), answers)
        )
    task = load_bundle(bundle_dict(PAIRWISE, fake_judge.base_url)).tasks["lease"]
    expected = reference_rewards(
        PAIRWISE, fake_judge.base_url, task, [a.removesuffix("<|im_end|>") for a in answers]
    )
    assert [float(r["rewards"][0]) for r in results] == expected
    for result in results:
        assert {key: float(value[0]) for key, value in result["extra_logs"].items()} == {
            "grader_failed": 0.0,
            "reward_func_error": 0.0,
            "group_incomplete": 0.0,
        }


def test_the_custom_loop_grades_an_inline_task(
    bundle_in: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = block("asyncio.run(main())").replace('"..."', '"A good answer."')
    run(code, bundle_in)
    assert capsys.readouterr().out.splitlines() == ["a 0.75 None", "b 0.75 None"]
