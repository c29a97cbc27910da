"""The project home's next step for the viewer: what to do now, with the counts that say why and
one button. An expert is sent to the pairs and responses waiting for them; a reviewer to the
generated rubrics nobody has reviewed; an admin along the path to a first search (tasks, splits,
expert labels on D_selection) and then to the searches.

Other apps add steps the way they add alerts (overview_panels): graders and reviews register a
callable from their AppConfig.ready(), since labeling never imports them. The first step any
source gives for a viewer's role is the one the home shows; labeling's own come last."""

from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, Q
from django.urls import reverse

from labeling.access import ProjectAccess
from labeling.models import (
    Annotator,
    AuthorKind,
    Preference,
    Provider,
    QueueAssignment,
    QueuePair,
    QueueSlot,
    Role,
    Rubric,
    Score,
    ScoreProvider,
    Split,
    Task,
)
from labeling.selectors import criterion_grading_left


@dataclass(frozen=True)
class NextStep:
    text: str
    button: str
    url: str


NextStepSource = Callable[[ProjectAccess, object], NextStep | None]

_REGISTERED: list[NextStepSource] = []


def next_step_register(source: NextStepSource) -> None:
    """Register a step source once (a second ready() call adds nothing)."""
    if source not in _REGISTERED:
        _REGISTERED.append(source)


def next_step(access: ProjectAccess, user: object) -> NextStep | None:
    """The step the home shows this viewer, or None when nothing waits for them."""
    own = (_admin_setup_step, _expert_step, _reviewer_step, _admin_search_step)
    for source in (*_REGISTERED, *own):
        step = source(access, user)
        if step is not None:
            return step
    return None


# Past this many, an expert is told "1,000+ pairs to label" (the home) or "1,000+ responses
# left" (the grading page): counting a queue of 50,000 open pairs cost the home 50 ms on the
# bench project, and the number changes nothing for someone about to label the next one.
WAITING_CAP = 1000


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def waiting_text(count: int, noun: str) -> str:
    """`count` of `noun`, or WAITING_CAP+ for a count that stopped above the cap."""
    if count > WAITING_CAP:
        return f"{WAITING_CAP:,}+ {noun}s"
    return _plural(count, noun)


def _expert_step(access: ProjectAccess, user: object) -> NextStep | None:
    if access.role not in (Role.EXPERT, Role.ADMIN):
        return None
    project = access.project
    # Read only, as the home is a GET: a user who never labeled has no Annotator row yet (the
    # queue makes it on first use), has been served nothing and has graded nothing, and
    # filtering by a None annotator matches no assignment and no grade.
    annotator = Annotator.objects.filter(project=project, user=user).first()
    served = QueueAssignment.objects.filter(pair=OuterRef("pk"), annotator=annotator)
    # EXISTS rather than a join with DISTINCT: a pair counts once however many slots are open.
    open_slot = QueueSlot.objects.filter(pair=OuterRef("pk"), done_at__isnull=True)
    pairs = (
        QueuePair.objects.filter(Exists(open_slot), project=project)
        .exclude(Exists(served))[: WAITING_CAP + 1]
        .count()
    )
    responses = criterion_grading_left(project=project, annotator=annotator, cap=WAITING_CAP)
    if not pairs and not responses:
        return None
    waiting = [
        text
        for count, text in (
            (pairs, waiting_text(pairs, "pair") + " to label"),
            (responses, waiting_text(responses, "response") + " to grade"),
        )
        if count
    ]
    slug = project.slug
    if pairs:
        return NextStep(", ".join(waiting), "Start labeling", reverse("label", args=[slug]))
    return NextStep(", ".join(waiting), "Grade criteria", reverse("grade", args=[slug]))


def _reviewer_step(access: ProjectAccess, user: object) -> NextStep | None:
    if access.role not in (Role.REVIEWER, Role.ADMIN):
        return None
    reviewed = Rubric.objects.filter(
        task=OuterRef("task"), author_kind=AuthorKind.REVIEWED, origin=OuterRef("origin")
    )
    waiting = (
        Rubric.objects.filter(task__project=access.project, author_kind=AuthorKind.GENERATED)
        .exclude(Exists(reviewed))
        .count()
    )
    if not waiting:
        return None
    return NextStep(
        f"{_plural(waiting, 'generated rubric')} not reviewed yet",
        "Review rubrics",
        reverse("rubric-list", args=[access.project.slug]),
    )


def _admin_setup_step(access: ProjectAccess, user: object) -> NextStep | None:
    """Along the path to a first search: tasks, then splits, then expert labels on
    D_selection. Once the path is walked, an admin's own labeling comes first."""
    if access.role != Role.ADMIN:
        return None
    project, slug = access.project, access.project.slug
    tasks = Task.objects.filter(project=project)
    if not tasks.exists():
        return NextStep(
            "No tasks yet: import tasks and responses (JSON Lines) to start",
            "Import",
            reverse("import", args=[slug]),
        )
    selection = tasks.filter(split=Split.SELECTION)
    if not selection.exists():
        unassigned = tasks.filter(split=Split.UNASSIGNED).count()
        return NextStep(
            f"{_plural(unassigned, 'task')} without a split: a search needs tasks in the "
            "selection split (D_selection) to choose a grader on",
            "Assign splits",
            reverse("splits", args=[slug]),
        )
    # "None labeled" asked as such: EXISTS stops at the first labeled task, where counting
    # the unlabeled ones read every selection task's scores and preferences. Each kind of
    # label is asked apart, human preferences first: as one OR of the two EXISTS PostgreSQL
    # hashed every human preference and expert score first (90 ms at 100,000 tasks).
    if not any(selection.filter(label).exists() for label in _expert_labels()):
        unlabeled = selection.count()
        return NextStep(
            f"No expert labels yet on the {_plural(unlabeled, 'task')} of the selection "
            "split: searches rank graders by agreement with them",
            "Open the queue",
            reverse("queue", args=[slug]),
        )
    return None


def _admin_search_step(access: ProjectAccess, user: object) -> NextStep | None:
    if access.role != Role.ADMIN:
        return None
    selection = Task.objects.filter(project=access.project, split=Split.SELECTION)
    labeled = selection.filter(_expert_labeled()).count()
    return NextStep(
        f"{_plural(labeled, 'selection-split task')} with expert labels: enough to search",
        "Search for a grader",
        reverse("searches", args=[access.project.slug]),
    )


def _expert_labeled() -> Q:
    """A task with a human preference or an expert score on a response."""
    human, expert = _expert_labels()
    return Q(human) | Q(expert)


def _expert_labels() -> tuple[Exists, Exists]:
    """The two kinds of expert label of the outer task: a human preference, an expert score
    on one of its responses."""
    return (
        Exists(Preference.objects.filter(task=OuterRef("pk"), provider=Provider.HUMAN)),
        Exists(Score.objects.filter(response__task=OuterRef("pk"), provider=ScoreProvider.EXPERT)),
    )
