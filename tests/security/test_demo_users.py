"""The demo's logins are published, so its users are demo project members and nothing more; it
never takes over an existing account and does not load with DEBUG off."""

import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from labeling.models import Membership, Project

pytestmark = pytest.mark.django_db


def load_demo() -> str:
    out = io.StringIO()
    call_command("load_demo", judge_url="http://127.0.0.1:9/v1", stdout=out)
    return out.getvalue()


def test_demo_users_are_members_not_staff(settings: Any) -> None:
    settings.DEBUG = True
    load_demo()
    users = User.objects.filter(username__in=["admin", "expert", "reviewer"])
    assert users.count() == 3
    assert not users.filter(is_staff=True).exists()
    assert not users.filter(is_superuser=True).exists()
    assert set(
        Membership.objects.filter(user__in=users).values_list("project__slug", flat=True)
    ) == {"demo"}


def test_an_existing_account_of_a_demo_name_is_never_taken_over(settings: Any) -> None:
    settings.DEBUG = True
    operator = User.objects.create_user("admin", password="the-operators-own-pw")
    with pytest.raises(CommandError, match=r"admin already exist.*never takes over"):
        load_demo()
    operator.refresh_from_db()
    assert operator.check_password("the-operators-own-pw")
    assert not operator.check_password("workbench-demo")
    assert (operator.is_staff, operator.is_superuser) == (False, False)
    # Nothing half-written: no demo project, no other demo user.
    assert not Project.objects.filter(slug="demo").exists()
    assert list(User.objects.values_list("username", flat=True)) == ["admin"]


def test_the_demo_refuses_to_load_with_debug_off(settings: Any) -> None:
    settings.DEBUG = False
    with pytest.raises(CommandError, match="only with DEBUG on"):
        load_demo()
    assert not Project.objects.exists() and not User.objects.exists()
