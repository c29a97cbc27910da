"""Which program writes and checks the rubrics under review, and which judge it runs on.

A generated rubric belongs to the program that wrote it (Rubric.origin is the program's content
hash, graders.grading.rubric_origin), because only that program's grading runs read it back.
Review therefore works on the rubrics of the project's selected rubric grader, and a re-check
of a rubric always runs the program that wrote it."""

from graders.engine.programs import program_validate
from graders.grading import rubric_origin
from graders.models import JudgeEndpoint, Metagrader
from graders.services import grader_selected
from labeling.models import Project, Rubric

# The kinds whose programs write a rubric per task, in order of preference.
RUBRIC_GRADER_KINDS = ("rubric", "pairwise_rubric")


class RubricSetupMissing(Exception):
    """Generation or a re-check cannot start; `page` names the page where it is fixed."""

    def __init__(self, message: str, page: str) -> None:
        super().__init__(message)
        self.page = page


def rubric_grader(*, project: Project) -> Metagrader:
    """The selected rubric grader, else the selected pairwise_rubric one."""
    for kind in RUBRIC_GRADER_KINDS:
        selection = grader_selected(project=project, kind=kind)
        if selection is not None:
            return selection.metagrader
    raise RubricSetupMissing(
        "No rubric grader is selected for this project. Promote a rubric or pairwise_rubric "
        "grader (from the Graders page or a search's leaderboard) to write rubrics.",
        page="graders",
    )


def rubric_judge(*, project: Project) -> JudgeEndpoint:
    """The project's default judge endpoint."""
    endpoint = JudgeEndpoint.objects.filter(project=project, is_default=True).first()
    if endpoint is None:
        raise RubricSetupMissing(
            "This project has no default judge endpoint. Add one on the Judges page.",
            page="judges",
        )
    return endpoint


def grader_origin(grader: Metagrader) -> str:
    """The Rubric.origin of the rubrics this grader writes."""
    return rubric_origin(program_validate(grader.program))


def rubric_writer(*, rubric: Rubric) -> Metagrader:
    """The program that wrote a generated rubric, which is the one whose runs read it."""
    writer = Metagrader.objects.filter(
        project_id=rubric.task.project_id, content_hash=rubric.origin
    ).first()
    if writer is None:
        raise RubricSetupMissing(
            "The program that wrote this rubric is no longer in the project.", page="graders"
        )
    return writer
