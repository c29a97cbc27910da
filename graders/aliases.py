"""Grader aliases: the names trainers address a grader by (`production`, `staging`, any
slug), each resolving to exactly one version, a Metagrader whose content hash names it.

Promotion moves an alias (made on first use) and rollback moves it back to the version it
held before; both are AliasMove rows, so who moved what, when, from which version to which
and why is never lost. The reward API (graders/reward_api.py) and the bundle endpoint
(graders/bundle_views.py) resolve an alias on every request, so a move takes effect on the
next request, and every answer names the version's hash for the trainer to log.

How this relates to GraderSelection ("the selected grader of a kind"): they stay separate.
A selection is the team's verdict of record, the best grader of a kind, which the graders
page, the `selected/<kind>` routes and a bundle's provenance read. An alias is a deployment
pointer that live training runs follow. Moving a running trainer's grader is a decision of
its own (often `staging` first, then `production`), so selecting a grader never re-points a
trainer behind its owner's back, and promoting to an alias never rewrites the verdict.

An alias keeps the kind of its first version: a trainer wired for a scalar grader (verl's
per-sample path cannot take a pairwise one) must not be handed another kind by a move."""

import re
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from graders.models import AliasMove, AliasMoveKind, GraderAlias, Metagrader
from labeling.models import Project

ALIAS_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,49}")
HISTORY_SHOWN = 20


class AliasInvalid(ValueError):
    """The move cannot be made; the message says why, in words a person can act on."""


def alias_name_check(name: str) -> str:
    """`name` if it is a usable alias name, else AliasInvalid saying what one looks like."""
    if not ALIAS_NAME.fullmatch(name):
        raise AliasInvalid(
            f"{name[:60]!r} is not an alias name: use 1 to 50 lowercase letters, digits, "
            "'-' or '_', starting with a letter or digit (for example production)"
        )
    return name


def _user_or_none(user: Any) -> Any:
    return user if getattr(user, "is_authenticated", False) else None


def _alias_locked(project: Project, name: str) -> GraderAlias | None:
    return GraderAlias.objects.select_for_update().filter(project=project, name=name).first()


@transaction.atomic
def alias_promote(
    *, project: Project, name: str, metagrader: Metagrader, user: Any = None, note: str = ""
) -> AliasMove:
    """Point alias `name` at `metagrader`, making the alias on first use, and record the move.

    The alias row is locked (select_for_update) for the move, so two promotions at once are
    applied one after the other and each records the version it really replaced."""
    alias_name_check(name)
    if metagrader.project_id != project.pk:
        raise AliasInvalid("the grader must belong to this project")
    alias = _alias_locked(project, name)
    if alias is None:
        try:
            # A savepoint: losing the race to make the alias leaves this transaction usable.
            with transaction.atomic():
                alias = GraderAlias.objects.create(
                    project=project, name=name, kind=metagrader.kind, metagrader=metagrader
                )
        except IntegrityError:
            alias = _alias_locked(project, name)
            assert alias is not None  # the winner's row is committed: that is the conflict
        else:
            return AliasMove.objects.create(
                alias=alias,
                kind=AliasMoveKind.PROMOTE,
                from_metagrader=None,
                to_metagrader=metagrader,
                moved_by=_user_or_none(user),
                note=note,
            )
    if alias.kind != metagrader.kind:
        raise AliasInvalid(
            f"{name} serves {alias.kind} graders and #{metagrader.pk} is {metagrader.kind}: "
            "trainers following it are set up for one kind; use another alias"
        )
    if alias.metagrader_id == metagrader.pk:
        raise AliasInvalid(f"{name} already points at #{metagrader.pk} {metagrader.name}")
    return _alias_move(alias, metagrader, AliasMoveKind.PROMOTE, user, note)


@transaction.atomic
def alias_rollback(*, project: Project, name: str, user: Any = None, note: str = "") -> AliasMove:
    """Move alias `name` back to the version it held before its latest promotion still in
    effect, and record that as a move. Rollbacks stack: after promotions A, B, C, two
    rollbacks lead to B and then A; a promotion after a rollback is undone by the next one."""
    alias = _alias_locked(project, name)
    if alias is None:
        raise AliasInvalid(f"there is no alias {name[:60]!r} in this project")
    target = _rollback_target(alias)
    if target is None:
        raise AliasInvalid(f"{name} has no earlier version to roll back to")
    return _alias_move(alias, target, AliasMoveKind.ROLLBACK, user, note)


def _rollback_target(alias: GraderAlias) -> Metagrader | None:
    """The `from` of the newest promotion that no later rollback undid: walking back, each
    rollback cancels the next promotion it meets, like popping a stack."""
    undone = 0
    for move in alias.moves.select_related("from_metagrader").order_by("-moved_at", "-pk"):
        if move.kind == AliasMoveKind.ROLLBACK:
            undone += 1
        elif undone:
            undone -= 1
        else:
            return move.from_metagrader
    return None


def _alias_move(
    alias: GraderAlias, metagrader: Metagrader, kind: str, user: Any, note: str
) -> AliasMove:
    previous = alias.metagrader
    alias.metagrader = metagrader
    alias.save(update_fields=["metagrader", "updated_at"])
    return AliasMove.objects.create(
        alias=alias,
        kind=kind,
        from_metagrader=previous,
        to_metagrader=metagrader,
        moved_by=_user_or_none(user),
        note=note,
    )


# Reads ----------------------------------------------------------------------------------------


def alias_resolve(*, project: Project, name: str) -> Metagrader | None:
    """The version alias `name` points at now, or None when the project has no such alias."""
    alias = (
        GraderAlias.objects.filter(project=project, name=name).select_related("metagrader").first()
    )
    return alias.metagrader if alias is not None else None


@dataclass(frozen=True)
class AliasRow:
    """An alias as the grader page lists it, with whether rollback has somewhere to go."""

    alias: GraderAlias
    can_roll_back: bool


def alias_panel(*, metagrader: Metagrader) -> dict[str, Any]:
    """What the grader page's aliases panel shows: the project's aliases (those pointing at
    this grader marked), which of them it could be promoted to, and the latest moves."""
    aliases = list(
        GraderAlias.objects.filter(project=metagrader.project_id).select_related("metagrader")
    )
    moves = (
        AliasMove.objects.filter(alias__project=metagrader.project_id)
        .select_related("alias", "from_metagrader", "to_metagrader", "moved_by")
        .order_by("-moved_at", "-pk")[:HISTORY_SHOWN]
    )
    return {
        "alias_rows": [AliasRow(alias, _rollback_target(alias) is not None) for alias in aliases],
        "aliases_here": [alias for alias in aliases if alias.metagrader_id == metagrader.pk],
        "alias_targets": [
            alias.name
            for alias in aliases
            if alias.kind == metagrader.kind and alias.metagrader_id != metagrader.pk
        ],
        "alias_moves": list(moves),
    }
