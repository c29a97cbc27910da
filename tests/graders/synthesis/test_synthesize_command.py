"""``manage.py synthesize``: a run from the command line, its cascade in the order given, and a
one-line reason for every bad argument."""

import pytest
from django.core.management import CommandError, call_command

from graders.models import SynthesisRun
from labeling.models import Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis.scripted import synthesis_project

BASE = ["--project", "acme", "--agent", "agent-a", "--agent", "agent-b", "--writer", "writer"]


@pytest.fixture
def ready(project: Project, fake_judge: FakeJudgeServer) -> Project:
    synthesis_project(project, fake_judge, ("t1", "t2", "t3"))
    return project


def test_synthesize_starts_a_run(ready: Project, capsys: pytest.CaptureFixture[str]) -> None:
    call_command(
        "synthesize", *BASE, "--judge", "judge-2", "--judge", "judge-1", "--dimension", "warmth",
        "--retries", "1", "--seed", "7", "--max-calls", "500", "--name", "cli-run",
    )  # fmt: skip
    run = SynthesisRun.objects.get()
    assert "Synthesis run" in capsys.readouterr().out
    assert [j.endpoint.name for j in run.cascade.all()] == ["judge-2", "judge-1"]
    assert run.synthesis.external_id == "cli-run" and run.synthesis.judges == ["judge-2", "judge-1"]
    assert (run.retries, run.seed, run.max_calls) == (1, 7, 500)
    assert [d.name for d in run.dimensions.all()] == ["warmth"]
    assert run.synthesis.cells.count() == 3 and run.mode == "single"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--judge", "nobody"], "--judge: project 'acme' has no endpoint 'nobody'"),
        (["--judge", "judge-1", "--dimension", "tone"], "has no dimension 'tone'"),
        (["--judge", "judge-1", "--judge", "judge-1"], "listed twice in the cascade"),
        (["--judge", "judge-1", "--retries", "11"], "retries R must be 0 to 10"),
        (["--judge", "judge-1", "--mode", "conversation"], "user-simulator endpoint"),
        (["--judge", "judge-1", "--domain", "legal"], "no tasks in legal"),
    ],
)
def test_synthesize_refuses_bad_arguments(ready: Project, extra: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("synthesize", *BASE, *extra)
    assert not SynthesisRun.objects.exists()
