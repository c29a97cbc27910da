"""API tokens: made and revoked by project admins on their page, stored only as a hash,
shown once, and resolved by the API's authentication."""

import hashlib
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from graders.models import ApiToken
from graders.tokens import TokenInvalid, token_authenticate, token_create, token_revoke
from labeling.models import Membership, Project, Role, Task

pytestmark = pytest.mark.django_db

TOKEN = re.compile(r"wbt_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")


def test_a_token_is_stored_as_a_hash_and_resolves_until_revoked(project: Project) -> None:
    token, raw = token_create(project=project, name="job", scopes=["reward", "export"])
    assert TOKEN.fullmatch(raw) and raw.split("_")[1] == token.prefix
    assert token.secret_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(ApiToken.objects.filter(pk=token.pk).values().get())
    assert token_authenticate(raw=raw) == token
    token_revoke(token=token)
    first = ApiToken.objects.get().revoked_at
    token_revoke(token=token)
    assert ApiToken.objects.get().revoked_at == first  # revoking again keeps the first time
    with pytest.raises(TokenInvalid, match="revoked"):
        token_authenticate(raw=raw)


@pytest.mark.parametrize("raw", ["", "wbt", "wbt_1234_" + "a" * 43, "xyz_0123abcd_" + "a" * 43,
                                 "wbt_0123ABCD_" + "a" * 43, "wbt_0123abcd_short"])  # fmt: skip
def test_malformed_tokens_are_refused_before_any_lookup(
    raw: str, django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0), pytest.raises(TokenInvalid, match="Malformed"):
        token_authenticate(raw=raw)


def test_a_token_needs_known_scopes_and_a_sane_rate(project: Project) -> None:
    with pytest.raises(ValueError, match="scopes"):
        token_create(project=project, name="x", scopes=["admin"])
    with pytest.raises(ValueError, match="scopes"):
        token_create(project=project, name="x", scopes=[])
    with pytest.raises(ValueError, match="rate_per_minute"):
        token_create(project=project, name="x", scopes=["reward"], rate_per_minute=0)


# The page -------------------------------------------------------------------------------------


def page(slug: str = "acme") -> str:
    return reverse("api-tokens", args=[slug])


def test_admin_makes_a_token_and_sees_the_secret_once(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    assert client.get(page()).status_code == 200
    made = client.post(page(), {"name": "grpo-run-7", "scopes": ["reward"], "rate_per_minute": 120})
    assert made.status_code == 302 and made["Location"] == page()  # post/redirect/get
    assert not TOKEN.search(made.content.decode())
    shown = client.get(page())
    assert shown.status_code == 200 and shown["Cache-Control"] == "no-store"
    secrets = TOKEN.findall(shown.content.decode())
    assert len(secrets) == 1
    token = ApiToken.objects.get()
    assert (token.name, token.scopes, token.rate_per_minute) == ("grpo-run-7", ["reward"], 120)
    assert token.created_by == admin_user and token_authenticate(raw=secrets[0]) == token
    listing = client.get(page()).content.decode()
    assert secrets[0] not in listing and not TOKEN.search(listing)
    assert "grpo-run-7" in listing and f"wbt_{token.prefix}_" in listing and "ada" in listing
    assert ApiToken.objects.count() == 1  # reloading the page made no second token


def test_a_secret_waits_in_the_session_for_its_own_project_only(
    client: Client, admin_user: User, project: Project
) -> None:
    other = Project.objects.create(slug="beta", name="Beta")
    Membership.objects.create(user=admin_user, project=other, role=Role.ADMIN)
    client.force_login(admin_user)
    client.post(page(), {"name": "job", "scopes": ["reward"], "rate_per_minute": 60})
    assert not TOKEN.search(client.get(page("beta")).content.decode())  # not the other project's
    (secret,) = TOKEN.findall(client.get(page()).content.decode())
    assert token_authenticate(raw=secret) == ApiToken.objects.get()
    assert not any(TOKEN.search(str(value)) for value in client.session.values())


def test_the_example_call_names_a_task_of_the_project(
    client: Client, admin_user: User, project: Project
) -> None:
    client.force_login(admin_user)
    assert '{"task_id": &quot;t1&quot;, "responses"' in client.get(page()).content.decode()
    Task.objects.create(project=project, external_id="deal-1", prompt="Summarise.")
    Task.objects.create(project=project, external_id="deal-2", prompt="Summarise.")
    html = client.get(page()).content.decode()
    assert '{"task_id": &quot;deal-1&quot;, "responses"' in html  # the project's first task


def test_a_bad_form_is_a_400_with_errors_and_no_token(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    bad = client.post(page(), {"name": "", "scopes": [], "rate_per_minute": 0})
    assert bad.status_code == 400 and ApiToken.objects.count() == 0
    assert b"errorlist" in bad.content


def test_revoking_on_the_page_stops_the_token_at_once(
    client: Client, admin_user: User, project: Project
) -> None:
    token, raw = token_create(project=project, name="job", scopes=["reward"])
    client.force_login(admin_user)
    revoked = client.post(reverse("api-token-revoke", args=["acme", token.pk]), follow=True)
    assert revoked.status_code == 200 and b"revoked" in revoked.content
    with pytest.raises(TokenInvalid, match="revoked"):
        token_authenticate(raw=raw)
    assert client.get(reverse("api-token-revoke", args=["acme", token.pk])).status_code == 405


def test_only_the_projects_admins_reach_the_page(
    client: Client, project: Project, expert_user: User, reviewer_user: User, outsider: User
) -> None:
    token, _ = token_create(project=project, name="job", scopes=["reward"])
    revoke = reverse("api-token-revoke", args=["acme", token.pk])
    assert client.get(page()).status_code == 302  # to the login page
    for user, status in ((expert_user, 403), (reviewer_user, 403), (outsider, 404)):
        client.force_login(user)
        assert client.get(page()).status_code == status, user
        made = client.post(page(), {"name": "x", "scopes": ["reward"], "rate_per_minute": 5})
        assert made.status_code == status
        assert client.post(revoke).status_code == status
    assert ApiToken.objects.get().revoked_at is None and ApiToken.objects.count() == 1


def test_an_admin_cannot_revoke_another_projects_token(
    client: Client, admin_user: User, outsider: User
) -> None:
    other = Project.objects.get(slug="other")
    theirs, _ = token_create(project=other, name="theirs", scopes=["reward"])
    client.force_login(admin_user)
    assert client.post(reverse("api-token-revoke", args=["acme", theirs.pk])).status_code == 404
    assert ApiToken.objects.get().revoked_at is None
