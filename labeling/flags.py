"""Flags on served pairs: an annotator reports a pair that should not be labeled as it is
("responses identical", "prompt unclear", ...), which also passes it on; admins list the flags of
their project and resolve them. An annotator never sees anyone else's flags."""

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from labeling.models import FlagReason, PairFlag, Project, QueueAssignment
from labeling.queue import assignment_skip

NOTE_MAX = 2000


class FlagRejected(ValueError):
    """A flag that cannot be stored: an unknown reason or a note too long."""


@dataclass(frozen=True)
class FlagInput:
    reason: str
    note: str = ""


def pair_flag(*, assignment: QueueAssignment, flag: FlagInput) -> PairFlag:
    """Record the annotator's flag on the pair of their assignment (flagging again replaces
    their reason and note, and reopens a resolved flag) and pass the pair on unless they had
    labeled it already."""
    if flag.reason not in FlagReason.values:
        raise FlagRejected(f"reason must be one of {', '.join(FlagReason.values)}")
    note = flag.note.strip()
    if len(note) > NOTE_MAX:
        raise FlagRejected(f"the note is longer than {NOTE_MAX} characters")
    with transaction.atomic():
        row, _ = PairFlag.objects.update_or_create(
            pair_id=assignment.pair_id,
            annotator=assignment.annotator,
            defaults={
                "reason": flag.reason,
                "note": note,
                "resolved_at": None,
                "resolved_by": None,
            },
        )
        assignment_skip(assignment=assignment)
    return row


def flags_for_admin(*, project: Project, resolved: bool = False) -> QuerySet[PairFlag]:
    """The project's open flags (or its resolved ones), newest first, with what an admin needs
    to find the pair."""
    return (
        PairFlag.objects.filter(pair__project=project, resolved_at__isnull=not resolved)
        .select_related("pair__task", "pair__dimension", "annotator", "resolved_by")
        .order_by(F("resolved_at").desc(nulls_first=True), "-created_at", "-pk")
    )


def flag_resolve(*, project: Project, flag_id: int, user: Any) -> bool:
    """Mark one of the project's open flags resolved by `user`; False when there is no such
    open flag."""
    return bool(
        PairFlag.objects.filter(pk=flag_id, pair__project=project, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolved_by=user
        )
    )
