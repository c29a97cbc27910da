"""Project settings in the app (labeling/project_settings.py, settings_views.py): admins change
settings, dimensions and members, every change recorded with who and when; a project keeps an
admin; nobody else reaches the page; projects are created in the app."""

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labeling.models import Dimension, Membership, Project, ProjectChange, Role
from labeling.project_settings import (
    SettingsRefused,
    change_text,
    member_add,
    member_remove,
    member_role_set,
    project_create,
    project_settings_save,
)
from tests.labeling.test_queue import queued  # noqa: F401

pytestmark = pytest.mark.django_db


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def settings_post(project: Project, **changes: Any) -> dict[str, Any]:
    """The settings form as the page posts it: every field, some changed."""
    values = {
        "name": project.name, "guidelines": project.guidelines, "overlap": project.overlap,
        "capture_rate": project.capture_rate, "drift_margin": project.drift_margin,
        "drift_min_pairs": project.drift_min_pairs, "research_max_calls": "",
        "research_max_cost": "",
    }  # fmt: skip
    if project.allow_ties:
        values["allow_ties"] = "on"
    values.update(changes)
    return values


def test_only_admins_reach_the_settings(
    project: Project, admin_user: User, reviewer_user: User, expert_user: User, outsider: User
) -> None:
    url = reverse("project-settings", args=[project.slug])
    statuses = {
        user.username: logged_in(user).get(url).status_code
        for user in (admin_user, reviewer_user, expert_user, outsider)
    }
    assert statuses == {"ada": 200, "rob": 403, "eve": 403, "oscar": 404}
    before = Project.objects.get(pk=project.pk).overlap
    logged_in(expert_user).post(url, settings_post(project, overlap=3))
    assert Project.objects.get(pk=project.pk).overlap == before


def test_a_settings_change_is_saved_and_recorded_with_who_and_what(
    project: Project, admin_user: User
) -> None:
    url = reverse("project-settings", args=[project.slug])
    answer = logged_in(admin_user).post(
        url, settings_post(project, overlap=2, guidelines="Prefer **cited** answers.")
    )
    assert answer.status_code == 302
    project.refresh_from_db()
    assert (project.overlap, project.guidelines) == (2, "Prefer **cited** answers.")
    (change,) = ProjectChange.objects.filter(project=project)
    assert change.user == admin_user and change.kind == "settings"
    assert change.detail == {"guidelines": ["", "Prefer **cited** answers."], "overlap": [1, 2]}
    assert change_text(change) == "guidelines: none → Prefer **cited** answers.; overlap: 1 → 2"
    page = logged_in(admin_user).get(url).content.decode()
    assert "overlap: 1 → 2" in page and "ada" in page

    # Saving the same values records nothing.
    logged_in(admin_user).post(url, settings_post(project))
    assert ProjectChange.objects.filter(project=project).count() == 1


def test_bad_settings_are_refused_with_the_field_named(project: Project, admin_user: User) -> None:
    url = reverse("project-settings", args=[project.slug])
    answer = logged_in(admin_user).post(url, settings_post(project, capture_rate="1.5", overlap=0))
    assert answer.status_code == 400
    errors = answer.context["form"].errors
    assert set(errors) == {"capture_rate", "overlap"}
    # The policy needs a budget: refused as a whole, nothing written.
    answer = logged_in(admin_user).post(url, settings_post(project, research_auto="on"))
    assert answer.status_code == 400
    assert "needs a budget" in answer.content.decode()
    project.refresh_from_db()
    assert (project.capture_rate, project.overlap, project.research_auto) == (0.0, 1, False)
    assert not ProjectChange.objects.exists()


def test_dimensions_are_added_edited_retired_and_restored(
    project: Project, admin_user: User
) -> None:
    client = logged_in(admin_user)
    add = reverse("project-dimension-add", args=[project.slug])
    client.post(add, {"name": "tone", "description": "Polite?"})
    answer = client.post(add, {"name": "tone", "description": "again"}, follow=True)
    assert "already has a dimension named" in answer.content.decode()
    dimension = Dimension.objects.get(project=project, name="tone")
    update = reverse("project-dimension-update", args=[project.slug, dimension.pk])
    client.post(update, {"action": "save", "description": "Polite and calm?"})
    client.post(update, {"action": "retire"})
    dimension.refresh_from_db()
    assert dimension.description == "Polite and calm?" and dimension.retired_at is not None
    # A retired dimension is not offered for new queue blocks.
    queue = client.get(reverse("queue", args=[project.slug]))
    assert 'value="tone"' not in queue.content.decode()
    client.post(update, {"action": "restore"})
    dimension.refresh_from_db()
    assert dimension.retired_at is None
    texts = [change_text(c) for c in ProjectChange.objects.order_by("at", "pk")]
    assert texts == [
        "added dimension tone",
        "tone description: Polite? → Polite and calm?",
        "retired dimension tone",
        "restored dimension tone",
    ]


def test_members_are_added_by_username_or_email_and_roles_changed(
    project: Project, admin_user: User
) -> None:
    User.objects.create_user(username="lee", email="Lee@Example.com", password="pw-1234567")
    User.objects.create_user(username="kim", password="pw-1234567")
    client = logged_in(admin_user)
    add = reverse("project-member-add", args=[project.slug])
    client.post(add, {"who": "lee@example.com", "role": Role.EXPERT})
    client.post(add, {"who": "kim", "role": Role.REVIEWER})
    answer = client.post(add, {"who": "nobody", "role": Role.EXPERT}, follow=True)
    assert "No active user has the username or email" in answer.content.decode()
    lee = Membership.objects.get(project=project, user__username="lee")
    update = reverse("project-member-update", args=[project.slug, lee.pk])
    client.post(update, {"action": "role", "role": Role.REVIEWER})
    lee.refresh_from_db()
    assert lee.role == Role.REVIEWER
    kim = Membership.objects.get(project=project, user__username="kim")
    client.post(reverse("project-member-update", args=[project.slug, kim.pk]), {"action": "remove"})
    assert not Membership.objects.filter(pk=kim.pk).exists()
    texts = [change_text(c) for c in ProjectChange.objects.order_by("at", "pk")]
    assert texts == [
        "added lee as expert",
        "added kim as reviewer",
        "lee role: expert → reviewer",
        "removed kim (reviewer)",
    ]


def test_the_last_admin_can_be_neither_removed_nor_demoted(
    project: Project, admin_user: User
) -> None:
    membership = Membership.objects.get(project=project, user=admin_user)
    with pytest.raises(SettingsRefused, match="at least one admin"):
        member_remove(membership=membership, user=admin_user)
    with pytest.raises(SettingsRefused, match="at least one admin"):
        member_role_set(membership=membership, user=admin_user, role=Role.EXPERT)
    other = User.objects.create_user(username="bo", password="pw-1234567")
    member_add(project=project, user=admin_user, who="bo", role=Role.ADMIN)
    member_role_set(membership=membership, user=admin_user, role=Role.EXPERT)  # now allowed
    assert Membership.objects.get(project=project, user=other).role == Role.ADMIN
    with pytest.raises(SettingsRefused, match="already a member"):
        member_add(project=project, user=admin_user, who="bo", role=Role.EXPERT)


def test_a_project_created_in_the_app_has_its_creator_as_admin(admin_user: User) -> None:
    client = logged_in(admin_user)
    answer = client.post(reverse("project-new"), {"name": "Tax memos Q3", "slug": ""})
    project = Project.objects.get(slug="tax-memos-q3")
    assert answer.url == reverse("project-settings", args=[project.slug])
    assert Membership.objects.get(project=project).user == admin_user
    assert Membership.objects.get(project=project).role == Role.ADMIN
    (change,) = ProjectChange.objects.filter(project=project)
    assert change_text(change) == "created the project at /p/tax-memos-q3/"
    taken = client.post(reverse("project-new"), {"name": "Tax memos Q3", "slug": ""})
    assert taken.status_code == 400 and "is taken" in taken.content.decode()
    with pytest.raises(SettingsRefused, match="no letters or digits"):
        project_create(user=admin_user, name="!!!")
    assert "New project" in client.get(reverse("project-list")).content.decode()


def test_guidelines_are_rendered_as_sanitized_markdown_on_the_label_page(
    queued: Project,  # noqa: F811 (the fixture imported above)
) -> None:
    project = queued
    admin_user = User.objects.create_user(username="ada", password="pw-1234567")
    Membership.objects.create(project=project, user=admin_user, role=Role.ADMIN)
    project_settings_save(
        project=project,
        user=admin_user,
        values={"guidelines": "Prefer **cited** answers. <script>alert(1)</script>"},
    )
    page = logged_in(admin_user).get(reverse("label", args=[project.slug])).content.decode()
    assert "<strong>cited</strong>" in page
    assert "<script>alert(1)</script>" not in page


def project_reads(queries: CaptureQueriesContext) -> int:
    return sum(
        q["sql"].startswith("SELECT") and 'FROM "labeling_project"' in q["sql"]
        for q in queries.captured_queries
    )


def test_a_failed_post_shows_the_stored_settings_reading_the_project_once_more_at_most(
    project: Project, admin_user: User
) -> None:
    url = reverse("project-settings", args=[project.slug])
    client = logged_in(admin_user)
    with CaptureQueriesContext(connection) as baseline:
        client.get(url)
    # Refused by the service (automatic re-search without a budget): one reload of what the
    # refused save may have set on the instance.
    with CaptureQueriesContext(connection) as refused:
        answer = client.post(url, settings_post(project, name="Renamed", research_auto="on"))
    assert answer.status_code == 400 and "needs a budget" in answer.content.decode()
    assert "<title>Settings · Acme" in answer.content.decode()
    assert project_reads(refused) == project_reads(baseline) + 1
    # Refused by the form: the stored project is untouched, nothing to reload.
    with CaptureQueriesContext(connection) as invalid:
        answer = client.post(url, settings_post(project, name="Renamed", overlap=0))
    assert answer.status_code == 400 and "<title>Settings · Acme" in answer.content.decode()
    assert project_reads(invalid) == project_reads(baseline)
    project.refresh_from_db()
    assert project.name == "Acme" and not ProjectChange.objects.exists()
