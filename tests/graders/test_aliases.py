"""Grader aliases: promotion and rollback (graders/aliases.py), the reward API and the bundle
by alias, the version hash in every reward answer, and the aliases panel of the grader page."""

import contextlib
import itertools
import threading
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.urls import reverse

from graders.aliases import AliasInvalid, alias_promote, alias_resolve, alias_rollback
from graders.engine.baseline import baseline_program
from graders.models import (
    AliasMove,
    AliasMoveKind,
    ApiToken,
    GraderAlias,
    GraderExport,
    JudgeEndpoint,
    Metagrader,
)
from graders.services import grader_promote, metagrader_register
from graders.tokens import token_create, token_revoke
from labeling.imports import jsonl_import
from labeling.models import Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_reward_api import quality_responder
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db

GROUP = [
    {"id": "r0", "content": "GOOD answer"},
    {"id": "r1", "content": "OKAY answer"},
    {"id": "r2", "content": "POOR answer"},
]


@pytest.fixture(autouse=True)
def rate_counts_cleared() -> None:
    cache.clear()


@pytest.fixture
def judged_project(project: Project, tmp_path: Path, fake_judge: FakeJudgeServer) -> Project:
    fake_judge.responder = quality_responder
    records = [{"type": "task", "id": "t0", "prompt": "Review contract 0", "split": "eval"}]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "t.jsonl", records))
    JudgeEndpoint.objects.create(
        project=project, name="fake", base_url=fake_judge.base_url, model="fake-judge",
        is_default=True,
    )  # fmt: skip
    return project


def version(project: Project, label: str, kind: str = "scalar") -> Metagrader:
    """A distinct version of the baseline program of `kind` (its description differs)."""
    program = baseline_program(kind).to_json() | {"description": f"Version {label}."}
    return metagrader_register(project=project, program=program, origin="human")


@pytest.fixture
def versions(judged_project: Project) -> list[Metagrader]:
    return [version(judged_project, label) for label in "ABC"]


def tokens(project: Project) -> dict[str, str]:
    return {
        scope: token_create(project=project, name=scope, scopes=[scope])[1]
        for scope in ("reward", "export")
    }


def bearer(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}


def post(client: Client, url: str, body: Any, raw: str) -> Any:
    return client.post(url, body, content_type="application/json", headers=bearer(raw))


def get_reward_body() -> dict[str, Any]:
    return {"query": ["Q: cap?\nA: GOOD", "Q: cap?\nA: POOR"], "prompts": ["Q: cap?\nA:"] * 2}


# Promotion and rollback ------------------------------------------------------------------------


def test_promotion_makes_the_alias_on_first_use_and_records_every_move(
    judged_project: Project, versions: list[Metagrader], admin_user: User
) -> None:
    a, b, _ = versions
    first = alias_promote(
        project=judged_project, name="production", metagrader=a, user=admin_user, note="first"
    )
    second = alias_promote(project=judged_project, name="production", metagrader=b)
    alias = GraderAlias.objects.get()
    assert (alias.name, alias.kind, alias.metagrader) == ("production", "scalar", b)
    assert alias_resolve(project=judged_project, name="production") == b
    assert alias_resolve(project=judged_project, name="staging") is None
    moves = list(AliasMove.objects.order_by("pk"))
    assert moves == [first, second]
    assert (first.from_metagrader, first.to_metagrader, first.moved_by, first.note) == (
        None, a, admin_user, "first",
    )  # fmt: skip
    assert (second.from_metagrader, second.to_metagrader, second.moved_by) == (a, b, None)
    assert {move.kind for move in moves} == {AliasMoveKind.PROMOTE}


def test_promotion_refuses_bad_names_other_kinds_other_projects_and_no_moves(
    judged_project: Project, versions: list[Metagrader], outsider: User
) -> None:
    a = versions[0]
    for bad in ("", "Production", "-x", "a b", "x" * 51, "prod/uction"):
        with pytest.raises(AliasInvalid, match="not an alias name"):
            alias_promote(project=judged_project, name=bad, metagrader=a)
    alias_promote(project=judged_project, name="production", metagrader=a)
    with pytest.raises(AliasInvalid, match="already points at"):
        alias_promote(project=judged_project, name="production", metagrader=a)
    pairwise = version(judged_project, "P", kind="pairwise")
    with pytest.raises(AliasInvalid, match="serves scalar graders"):
        alias_promote(project=judged_project, name="production", metagrader=pairwise)
    other = Project.objects.get(slug="other")
    with pytest.raises(AliasInvalid, match="belong to this project"):
        alias_promote(project=other, name="production", metagrader=a)
    assert AliasMove.objects.count() == 1
    assert GraderAlias.objects.get().metagrader == a


def test_a_promotion_whose_record_fails_leaves_the_alias_where_it_was(
    judged_project: Project, versions: list[Metagrader], monkeypatch: Any
) -> None:
    a, b, _ = versions
    alias_promote(project=judged_project, name="production", metagrader=a)

    def broken(**fields: Any) -> None:
        raise RuntimeError("the history table is full")

    monkeypatch.setattr(AliasMove.objects, "create", broken)
    with pytest.raises(RuntimeError):
        alias_promote(project=judged_project, name="production", metagrader=b)
    with pytest.raises(RuntimeError):
        alias_promote(project=judged_project, name="staging", metagrader=b)
    # All or nothing: the alias did not move, and no alias was made without its first move.
    assert GraderAlias.objects.get().metagrader == a
    assert AliasMove.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_promotions_each_record_the_version_they_really_replaced(
    judged_project: Project, versions: list[Metagrader]
) -> None:
    """Threads promote at once, the first ones racing to make the alias: the history must
    still be one chain, each move starting where the one before it ended."""
    made: list[AliasMove] = []

    def promote(order: list[Metagrader]) -> None:
        try:
            for grader in order * 3:
                # AliasInvalid: it already pointed there, so there is nothing to record.
                with contextlib.suppress(AliasInvalid):
                    move = alias_promote(
                        project=judged_project, name="production", metagrader=grader
                    )
                    made.append(move)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=promote, args=[versions[shift:] + versions[:shift]])
        for shift in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    moves = list(AliasMove.objects.order_by("pk"))
    assert len(moves) == len(made) >= 3
    assert moves[0].from_metagrader is None
    for before, after in itertools.pairwise(moves):
        assert after.from_metagrader_id == before.to_metagrader_id
    assert GraderAlias.objects.get().metagrader_id == moves[-1].to_metagrader_id


def test_rollback_walks_back_through_promotions_and_is_recorded(
    judged_project: Project, versions: list[Metagrader], admin_user: User
) -> None:
    a, b, c = versions
    d = version(judged_project, "D")
    for grader in (a, b, c):
        alias_promote(project=judged_project, name="production", metagrader=grader)

    def rollback() -> Metagrader:
        move = alias_rollback(project=judged_project, name="production", user=admin_user)
        assert move.kind == AliasMoveKind.ROLLBACK and move.moved_by == admin_user
        resolved = alias_resolve(project=judged_project, name="production")
        assert resolved == move.to_metagrader
        return resolved

    # Promotions A, B, C: rollbacks lead to B, then A (a stack, not a toggle between two).
    assert rollback() == b
    assert rollback() == a
    with pytest.raises(AliasInvalid, match="no earlier version"):
        rollback()
    # A promotion after rollbacks is what the next rollback undoes.
    alias_promote(project=judged_project, name="production", metagrader=d)
    assert rollback() == a
    with pytest.raises(AliasInvalid, match="no earlier version"):
        rollback()
    with pytest.raises(AliasInvalid, match="no alias 'staging'"):
        alias_rollback(project=judged_project, name="staging")
    history = [(m.kind, m.from_metagrader, m.to_metagrader) for m in AliasMove.objects.all()]
    assert history == [  # newest first
        ("rollback", d, a), ("promote", a, d), ("rollback", b, a), ("rollback", c, b),
        ("promote", b, c), ("promote", a, b), ("promote", None, a),
    ]  # fmt: skip


def test_selecting_a_grader_does_not_move_an_alias(
    judged_project: Project, versions: list[Metagrader]
) -> None:
    a, b, _ = versions
    alias_promote(project=judged_project, name="production", metagrader=a)
    grader_promote(project=judged_project, metagrader=b)
    assert alias_resolve(project=judged_project, name="production") == a


# The reward API by alias, and the version in every answer --------------------------------------


def test_both_reward_endpoints_answer_by_alias_and_follow_its_moves(
    client: Client, judged_project: Project, versions: list[Metagrader]
) -> None:
    a, b, _ = versions
    raw = tokens(judged_project)["reward"]
    reward_url = reverse("api-reward-alias", args=["acme", "production"])
    get_reward_url = reverse("api-get-reward-alias", args=["acme", "production"])
    for expected in (a, b):
        alias_promote(project=judged_project, name="production", metagrader=expected)
        answer = post(client, reward_url, {"task_id": "t0", "responses": GROUP}, raw)
        assert answer.status_code == 200, answer.json()
        assert answer.json()["rewards"] == [0.9, 0.5, 0.1]
        assert answer.json()["grader"] == {
            "id": expected.pk, "name": expected.name, "content_hash": expected.content_hash,
        }  # fmt: skip
        assert answer["X-Grader-Version"] == expected.content_hash
        openrlhf = post(client, get_reward_url, get_reward_body(), raw)
        assert openrlhf.status_code == 200
        assert openrlhf.json()["rewards"] == [0.9, 0.1]
        assert openrlhf.json()["grader"]["content_hash"] == expected.content_hash
        assert openrlhf["X-Grader-Version"] == expected.content_hash


def test_answers_by_id_and_by_selection_name_the_version_too(
    client: Client, judged_project: Project, versions: list[Metagrader]
) -> None:
    a = versions[0]
    raw = tokens(judged_project)["reward"]
    grader_promote(project=judged_project, metagrader=a)
    for name, key in (("api-reward", a.pk), ("api-reward-selected", "scalar")):
        answer = post(client, reverse(name, args=["acme", key]), {"task_id": "t0", "responses": GROUP}, raw)  # fmt: skip
        assert answer["X-Grader-Version"] == answer.json()["grader"]["content_hash"]
        assert answer["X-Grader-Version"] == a.content_hash
    for name, key in (("api-get-reward", a.pk), ("api-get-reward-selected", "scalar")):
        answer = post(client, reverse(name, args=["acme", key]), get_reward_body(), raw)
        assert answer["X-Grader-Version"] == answer.json()["grader"]["content_hash"]
        assert answer.json()["grader"]["id"] == a.pk


def test_an_unknown_alias_is_a_404_that_names_it(
    client: Client, judged_project: Project, versions: list[Metagrader]
) -> None:
    raw = tokens(judged_project)
    alias_promote(project=judged_project, name="production", metagrader=versions[0])
    for name in ("staging", "Not-A-Name"):
        for route in ("api-reward-alias", "api-get-reward-alias"):
            answer = post(client, reverse(route, args=["acme", name]), get_reward_body(), raw["reward"])  # fmt: skip
            assert answer.status_code == 404
            assert answer.json() == {"detail": f"No alias '{name}' in this project."}
        bundle = client.get(
            reverse("api-bundle-alias", args=["acme", name]), headers=bearer(raw["export"])
        )
        assert bundle.status_code == 404 and f"'{name}'" in bundle.json()["detail"]


def test_a_revoked_token_cannot_use_an_alias(
    client: Client, judged_project: Project, versions: list[Metagrader]
) -> None:
    raw = tokens(judged_project)
    alias_promote(project=judged_project, name="production", metagrader=versions[0])
    for token in ApiToken.objects.all():
        token_revoke(token=token)
    url = reverse("api-reward-alias", args=["acme", "production"])
    answer = post(client, url, {"task_id": "t0", "responses": GROUP}, raw["reward"])
    assert answer.status_code == 401 and answer.json()["detail"] == "This token was revoked."
    bundle = client.get(
        reverse("api-bundle-alias", args=["acme", "production"]), headers=bearer(raw["export"])
    )
    assert bundle.status_code == 401
    assert not GraderExport.objects.exists()


# The bundle by alias ---------------------------------------------------------------------------


def test_the_bundle_by_alias_has_the_hash_as_etag_and_answers_304_until_the_alias_moves(
    client: Client, judged_project: Project, versions: list[Metagrader]
) -> None:
    a, b, _ = versions
    raw = tokens(judged_project)
    alias_promote(project=judged_project, name="production", metagrader=a)
    url = reverse("api-bundle-alias", args=["acme", "production"])
    first = client.get(url, headers=bearer(raw["export"]))
    assert first.status_code == 200
    assert first["ETag"] == f'"{a.content_hash}"'
    assert first.json()["grader"]["content_hash"] == a.content_hash
    assert GraderExport.objects.filter(metagrader=a).count() == 1
    for sent in (f'"{a.content_hash}"', f'W/"{a.content_hash}"', f'"other", "{a.content_hash}"'):
        again = client.get(url, headers=bearer(raw["export"]) | {"If-None-Match": sent})
        assert again.status_code == 304, sent
        assert again["ETag"] == f'"{a.content_hash}"' and again.content == b""
    assert GraderExport.objects.count() == 1  # a 304 downloads nothing, so records nothing
    alias_promote(project=judged_project, name="production", metagrader=b)
    moved = client.get(url, headers=bearer(raw["export"]) | {"If-None-Match": f'"{a.content_hash}"'})  # fmt: skip
    assert moved.status_code == 200 and moved["ETag"] == f'"{b.content_hash}"'
    assert moved.json()["grader"]["id"] == b.pk
    assert GraderExport.objects.filter(metagrader=b, token__name="export").count() == 1
    # The reward scope does not download bundles.
    assert client.get(url, headers=bearer(raw["reward"])).status_code == 403


# The aliases panel -----------------------------------------------------------------------------


def test_the_grader_page_shows_its_aliases_and_admins_promote_and_roll_back(
    client: Client, judged_project: Project, versions: list[Metagrader], admin_user: User
) -> None:
    a, b, _ = versions
    client.force_login(admin_user)
    page = client.get(reverse("program", args=["acme", b.pk]))
    assert page.status_code == 200
    assert b"No alias points at this grader." in page.content
    assert b"Promote to alias" in page.content
    for grader in (a, b):
        promote = client.post(
            reverse("alias-promote", args=["acme", grader.pk]),
            {"alias": "production", "note": "<script>alert(1)</script>"},
        )
        assert promote.status_code == 302
    assert alias_resolve(project=judged_project, name="production") == b
    page = client.get(reverse("program", args=["acme", b.pk]))
    text = page.content.decode()
    assert '<span class="badge">production</span>' in text
    assert "Roll back" in text
    assert "<script>alert(1)</script>" not in text  # the note is escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    back = client.post(reverse("alias-rollback", args=["acme", b.pk]), {"alias": "production"})
    assert back.status_code == 302
    assert alias_resolve(project=judged_project, name="production") == a
    assert AliasMove.objects.first().moved_by == admin_user  # type: ignore[union-attr]
    refused = client.post(reverse("alias-promote", args=["acme", a.pk]), {"alias": "Bad Name"}, follow=True)  # fmt: skip
    assert "Not promoted: &#x27;Bad Name&#x27; is not an alias name" in refused.content.decode()


def test_only_admins_move_aliases(
    client: Client, judged_project: Project, versions: list[Metagrader], reviewer_user: User
) -> None:
    a = versions[0]
    client.force_login(reviewer_user)
    page = client.get(reverse("program", args=["acme", a.pk]))
    assert page.status_code == 200 and b"Promote to alias" not in page.content
    promote = client.post(reverse("alias-promote", args=["acme", a.pk]), {"alias": "production"})
    assert promote.status_code == 403
    assert not GraderAlias.objects.exists()
    assert client.get(reverse("alias-promote", args=["acme", a.pk])).status_code == 405
