"""The demo project: three domains of data written for this project, and three demo users.

The demo users' password is published (README, load_demo's output), so they are members of the
demo project only, never staff or superusers, and the demo loads only with DEBUG on (a
development checkout: `make run`). It never takes over an account: if a user of a demo user's
name exists outside the demo, nothing is loaded."""

from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from labeling.imports import jsonl_import
from labeling.models import Membership, Project, Role, Synthesis
from labeling.queue import queue_build
from labeling.strategies import CoverageFirst

DEMO_FILE = Path(__file__).resolve().parent / "demo_data" / "demo.jsonl"
DEMO_SLUG = "demo"
# A synthesis generated once with the bundled 135M judge as agent, steering writer and both
# filter judges (README, "The demo synthesis"): it shows the synthesis pages working, nothing
# about the quality of any judge. The pages read its label from this id (demo_synthesis_note).
DEMO_SYNTHESIS_FILE = DEMO_FILE.parent / "demo_synthesis.jsonl"
DEMO_SYNTHESIS_ID = "demo-airline-mechanics-only"
DEMO_SYNTHESIS_NOTE = "Demo synthesis: mechanics only (a 135M judge; not a quality result)"
DEMO_PASSWORD = "workbench-demo"
DEMO_USERS = (("admin", Role.ADMIN), ("expert", Role.EXPERT), ("reviewer", Role.REVIEWER))
DEMO_GUIDELINES = (
    "Judge each response as the client's senior reviewer would. Prefer the response that is "
    "correct and grounded in the source documents over the one that is longer or more polished. "
    "For agent trajectories, a policy violation outweighs friendliness. Use 'certain' only when "
    "you would defend the label to a colleague; 'a guess' is a fine answer."
)


class DemoRefused(Exception):
    """The demo cannot be loaded here; the message says why and what to do."""


@transaction.atomic
def demo_load() -> tuple[Project, bool]:
    """Create the demo project once; later calls return it untouched (False)."""
    if not settings.DEBUG:
        raise DemoRefused(
            f"The demo's users log in with a published password ({DEMO_PASSWORD!r}), so it "
            "loads only with DEBUG on (DEBUG=1, as `make run` sets)."
        )
    existing = Project.objects.filter(slug=DEMO_SLUG).first()
    if existing is not None:
        return existing, False
    user_model = get_user_model()
    names = [username for username, _ in DEMO_USERS]
    taken = sorted(user_model.objects.filter(username__in=names).values_list("username", flat=True))
    if taken:
        raise DemoRefused(
            f"User(s) {', '.join(taken)} already exist. The demo creates its own users "
            f"({', '.join(names)}) with a published password and never takes over an existing "
            "account: rename or delete those users (Django admin, /admin/auth/user/), or load "
            "the demo into a fresh database."
        )
    project = Project.objects.create(
        slug=DEMO_SLUG,
        name="Demo: memos, airline agent, financial analysis",
        guidelines=DEMO_GUIDELINES,
    )
    for username, role in DEMO_USERS:
        user = user_model.objects.create_user(username=username, password=DEMO_PASSWORD)
        Membership.objects.create(user=user, project=project, role=role)
    jsonl_import(project=project, path=DEMO_FILE)
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None], pairs_per_task=6)
    return project, True


def demo_synthesis_load(*, project: Project) -> bool:
    """Import the demo synthesis (its rollouts, cells, draws and votes) into the demo project
    unless it holds it already; True when it was imported."""
    if Synthesis.objects.filter(project=project, external_id=DEMO_SYNTHESIS_ID).exists():
        return False
    jsonl_import(project=project, path=DEMO_SYNTHESIS_FILE)
    return True


def demo_synthesis_note(synthesis: Synthesis) -> str:
    """The label every page and report shows with the demo synthesis; "" for any other."""
    is_demo = synthesis.external_id == DEMO_SYNTHESIS_ID and synthesis.project.slug == DEMO_SLUG
    return DEMO_SYNTHESIS_NOTE if is_demo else ""
