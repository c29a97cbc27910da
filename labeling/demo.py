"""The demo project: three domains of data written for this project, and three demo users."""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from labeling.imports import jsonl_import
from labeling.models import Membership, Project, Role
from labeling.queue import queue_build
from labeling.strategies import CoverageFirst

DEMO_FILE = Path(__file__).resolve().parent / "demo_data" / "demo.jsonl"
DEMO_SLUG = "demo"
DEMO_PASSWORD = "workbench-demo"
DEMO_USERS = (("admin", Role.ADMIN), ("expert", Role.EXPERT), ("reviewer", Role.REVIEWER))
DEMO_GUIDELINES = (
    "Judge each response as the client's senior reviewer would. Prefer the response that is "
    "correct and grounded in the source documents over the one that is longer or more polished. "
    "For agent trajectories, a policy violation outweighs friendliness. Use 'certain' only when "
    "you would defend the label to a colleague; 'a guess' is a fine answer."
)


@transaction.atomic
def demo_load() -> tuple[Project, bool]:
    """Create the demo project once; later calls return it untouched (False)."""
    existing = Project.objects.filter(slug=DEMO_SLUG).first()
    if existing is not None:
        return existing, False
    project = Project.objects.create(
        slug=DEMO_SLUG,
        name="Demo: memos, airline agent, financial analysis",
        guidelines=DEMO_GUIDELINES,
    )
    user_model = get_user_model()
    for username, role in DEMO_USERS:
        user = user_model.objects.filter(username=username).first()
        if user is None:
            user = user_model.objects.create_user(username=username, password=DEMO_PASSWORD)
        if role == Role.ADMIN:
            user.is_staff = user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
        Membership.objects.create(user=user, project=project, role=role)
    jsonl_import(project=project, path=DEMO_FILE)
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None], pairs_per_task=6)
    return project, True
