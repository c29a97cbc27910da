"""The reward API's reference in the app: Swagger UI from the sidecar package's static files over
the schema the API serves, for the people who manage tokens, with no request leaving the app."""

from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from playwright.sync_api import expect

from labeling.models import Project
from tests.browser import logged_in_page

pytestmark = pytest.mark.django_db


def test_reviewers_and_admins_read_it_and_experts_do_not(
    project: Project, admin_user: User, reviewer_user: User, expert_user: User
) -> None:
    url = reverse("api-docs", args=[project.slug])
    for user, status in ((admin_user, 200), (reviewer_user, 200), (expert_user, 403)):
        client = Client()
        client.force_login(user)
        assert client.get(url).status_code == status
    client = Client()
    client.force_login(admin_user)
    html = client.get(url).content.decode()
    assert f'data-schema-url="{reverse("api-schema")}"' in html
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "//cdn" not in html and "unpkg" not in html and "jsdelivr" not in html
    tokens = client.get(reverse("api-tokens", args=[project.slug])).content.decode()
    assert url in tokens  # linked from the tokens page


@pytest.mark.django_db(transaction=True)
def test_the_reference_renders_every_endpoint_with_no_external_request(
    browser: Any, live_server: Any, project: Project, admin_user: User
) -> None:
    page = logged_in_page(browser, live_server, admin_user)
    requested: list[str] = []
    problems: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))

    page.goto(f"{live_server.url}{reverse('api-docs', args=[project.slug])}")

    operations = page.locator(".swagger-ui .opblock")
    expect(operations.first).to_be_visible()
    expect(page.locator(".swagger-ui")).to_contain_text("/api/p/{slug}/graders/{grader_id}/reward")
    expect(page.locator(".swagger-ui")).to_contain_text("get_reward")
    expect(page.locator("#api-docs-loading")).to_have_count(0)
    # One block per operation of the served schema.
    schema = Client().get(reverse("api-schema"), HTTP_ACCEPT="application/json").json()
    methods = {"get", "post", "put", "patch", "delete"}
    served = sum(1 for item in schema["paths"].values() for method in item if method in methods)
    assert operations.count() == served

    # Open one operation with the mouse, and read its request body.
    operations.first.locator(".opblock-summary").click()
    expect(operations.first.locator(".opblock-body")).to_be_visible()

    origin = urlsplit(live_server.url).netloc
    outside = [url for url in requested if urlsplit(url).netloc not in (origin, "")]
    assert outside == []
    assert not any("validator" in url for url in requested)
    assert problems == []
