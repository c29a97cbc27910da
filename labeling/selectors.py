"""Reads: what pages and the API show. Blinding is decided here, by what is fetched."""

import hashlib
from collections import Counter, defaultdict
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Case, Count, F, OuterRef, Q, QuerySet, Subquery, Sum, When
from django.db.models.functions import Coalesce

from labeling.agreement_stats import (
    Category,
    Label,
    Tally,
    Vote,
    Workloads,
    tally,
    tally_panel_report,
    vote_order,
    workload,
)
from labeling.agreement_stats import Provider as AgreementProvider
from labeling.models import (
    Annotator,
    CriterionGrade,
    Dimension,
    Document,
    JudgeScore,
    Membership,
    Preference,
    Project,
    Provider,
    QueueAssignment,
    Response,
    ResponseTally,
    Rubric,
    RubricItem,
    Score,
    Split,
    Task,
)


def memberships_for_user(*, user: AbstractBaseUser) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(user=user)
        .select_related("project")
        .annotate(task_count=Count("project__tasks", distinct=True))
        .order_by("project__name")
    )


def split_table(*, project: Project) -> dict[str, dict[str, int]]:
    """Task counts per domain and split, every split present."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(Split.values, 0))
    rows = (
        Task.objects.filter(project=project).values_list("domain", "split").annotate(n=Count("pk"))
    )
    for domain, split, n in rows.order_by("domain"):
        table[domain][split] = n
    return dict(table)


def project_overview(*, project: Project) -> dict[str, Any]:
    # Through the annotator, who is of one project, rather than the task: a dozen annotators
    # join for nothing where 100,000 tasks took half the statement.
    labels = dict(
        Preference.objects.filter(annotator__project=project, is_current=True)
        .values_list("provider")
        .annotate(n=Count("pk"))
    )
    table = split_table(project=project)
    domains = {domain: sum(row.values()) for domain, row in table.items()}
    return {
        "tasks": sum(domains.values()),  # the table counts every task once
        "responses": Response.objects.filter(project=project).count(),
        "trajectories": Response.objects.filter(project=project, messages__isnull=False).count(),
        "rubrics": Rubric.objects.filter(task__project=project).count(),
        # On the project the rows repeat from their response: joining 300,000 scores to a
        # million responses cost the home 200-450 ms.
        "criterion_grades": CriterionGrade.objects.filter(project=project).count(),
        "scores": Score.objects.filter(project=project).count(),
        "judge_scores": JudgeScore.objects.filter(response__project=project).count(),
        "preferences": {
            provider: labels.get(provider, 0) for provider in ("human", "synthetic", "judge")
        },
        "splits": {split: sum(row[split] for row in table.values()) for split in Split.values},
        "domains": domains,
    }


def tasks_browse(
    *, project: Project, query: str = "", domain: str = "", split: str = ""
) -> QuerySet[Task]:
    tasks = Task.objects.filter(project=project)
    if query:
        tasks = tasks.filter(Q(external_id__icontains=query) | Q(prompt__icontains=query))
    if domain:
        tasks = tasks.filter(domain=domain)
    if split:
        tasks = tasks.filter(split=split)
    # Correlated counts, computed for the rows of one page only; a GROUP BY over the joined
    # tables would aggregate the whole project on every page (and in the paginator's count).
    responses = Response.objects.filter(task=OuterRef("pk")).values("task")
    labels = Preference.objects.filter(task=OuterRef("pk"), is_current=True).values("task")
    return tasks.annotate(
        response_count=Coalesce(Subquery(responses.annotate(n=Count("pk")).values("n")[:1]), 0),
        label_count=Coalesce(Subquery(labels.annotate(n=Count("pk")).values("n")[:1]), 0),
    ).order_by("external_id")


def project_domains(*, project: Project) -> list[str]:
    return list(
        Task.objects.filter(project=project)
        .values_list("domain", flat=True)
        .distinct()
        .order_by("domain")
    )


def task_detail(*, project: Project, external_id: str, with_sources: bool) -> dict[str, Any]:
    """A task with documents, responses and rubrics. Without `with_sources` the responses are
    plain dicts with no model name or metadata, so a blind reader's page cannot leak them."""
    task = Task.objects.get(project=project, external_id=external_id)
    # Response ids are the user's own strings and often name the model ("t1/gpt-x"), so a
    # blind reader gets neither ids nor sources.
    fields = ["content", "messages"]
    if with_sources:
        fields += ["external_id", "source_model", "metadata"]
    responses = list(Response.objects.filter(task=task).order_by("external_id").values(*fields))
    return {
        "task": task,
        "documents": list(task.documents.all()),
        "responses": responses,
        "rubrics": list(task.rubrics.prefetch_related("items").order_by("author_kind", "origin")),
    }


def _response_view(response: Response) -> dict[str, Any]:
    """What a blind reader may see of a response: its text or turns, nothing else."""
    return {"content": response.content, "messages": response.messages}


def side_shown(label: Preference, *, left_id: int) -> str:
    """A label's choice as its annotator saw the pair: "left", "right" or "tie", whichever
    order the label stores the two responses in."""
    winner = {"a": label.response_a_id, "b": label.response_b_id}.get(label.choice)
    return "tie" if winner is None else ("left" if winner == left_id else "right")


def pair_view(*, assignment: QueueAssignment) -> dict[str, Any]:
    """Everything the labeling page shows for one served pair, and nothing more: no model
    names, metadata, scores or other annotators' labels are fetched, so none can leak."""
    pair = assignment.pair
    task = Task.objects.only("prompt", "instructions").get(pk=pair.task_id)
    responses = Response.objects.only("content", "messages").in_bulk(
        [pair.response_a_id, pair.response_b_id]
    )
    a, b = responses[pair.response_a_id], responses[pair.response_b_id]
    left, right = (a, b) if assignment.slot_order == "ab" else (b, a)
    dimension = (
        Dimension.objects.only("name", "description").get(pk=pair.dimension_id)
        if pair.dimension_id
        else None
    )
    current = (
        Preference.objects.filter(
            Q(response_a_id=a.pk, response_b_id=b.pk) | Q(response_a_id=b.pk, response_b_id=a.pk),
            dimension_id=pair.dimension_id,
            annotator_id=assignment.annotator_id,
            is_current=True,
        )
        .only("choice", "confidence", "response_a_id", "response_b_id")
        .first()
    )
    side = None if current is None else side_shown(current, left_id=left.pk)
    # The block's introduction shows until the annotator labeled or passed on one of its pairs.
    first_in_block = (
        not QueueAssignment.objects.filter(
            annotator_id=assignment.annotator_id,
            pair__project_id=pair.project_id,
            pair__block=pair.block,
        )
        .filter(Q(submitted_at__isnull=False) | Q(skipped_at__isnull=False))
        .exists()
    )
    return {
        "assignment": assignment,
        "prompt": task.prompt,
        "instructions": task.instructions,
        "documents": list(Document.objects.filter(task_id=pair.task_id).only("title", "text")),
        "left": _response_view(left),
        "right": _response_view(right),
        "dimension": dimension,
        "current_side": side,
        "current_confidence": current.confidence if current is not None else None,
        "first_in_block": first_in_block and current is None,
    }


def criterion_grading_next(*, project: Project, annotator: Annotator) -> Response | None:
    """The next response with an expert rubric that this annotator has not fully graded:
    meta and selection tasks first, then by task and response id."""
    return _criterion_grading_open(project, annotator).only("pk", "external_id", "task_id").first()


# The responses _criterion_grading_open leaves out for an annotator: graded by them on at least
# as many criteria as their task's expert rubric has. One grouped pass over the annotator's
# own grades of the project's expert rubrics (a grade's criterion is one of its response's
# task, as criterion_grades_submit checks): the open set's correlated subqueries per response
# took seconds once 200,000 responses sat under expert rubrics. The grade's own project
# column picks the project; joining the tasks for it cost a third of the statement.
GRADED_IN_FULL_SQL = """
    SELECT count(*) FROM (
        SELECT i.rubric_id, g.response_id, count(*) AS graded
        FROM labeling_criteriongrade g
        JOIN labeling_rubricitem i ON i.id = g.item_id
        JOIN labeling_rubric rb ON rb.id = i.rubric_id
        WHERE g.annotator_id = %s AND g.project_id = %s
            AND rb.author_kind = 'expert' AND rb.origin = ''
        GROUP BY i.rubric_id, g.response_id
    ) mine
    JOIN (SELECT rubric_id, count(*) AS n FROM labeling_rubricitem GROUP BY rubric_id) items
        ON items.rubric_id = mine.rubric_id
    WHERE mine.graded >= items.n
"""


def criterion_grading_left(
    *, project: Project, annotator: Annotator | None, cap: int | None = None
) -> int:
    """How many responses this annotator has still to grade criterion by criterion: the
    responses under an expert rubric (summed from the tasks' ResponseTally, not counted) less
    those they graded in full (GRADED_IN_FULL_SQL), the same count as _criterion_grading_open's.
    None: a user without an annotator row yet, who has graded nothing.

    With `cap`, any answer above it is cap + 1, and what they graded in full is counted only
    near the end: each response graded in full has at least one of their grades, so while the
    responses under rubric outnumber their grades by more than cap, so do the responses left,
    and one count of their grades says so (an expert's 120,000 grades cost the grouped
    statement 65 to 110 ms on the bench project)."""
    under_rubric = int(
        ResponseTally.objects.filter(
            task__project=project, task__rubrics__author_kind="expert", task__rubrics__origin=""
        ).aggregate(n=Coalesce(Sum("responses"), 0))["n"]
    )
    if annotator is None:
        left = under_rubric
    elif (
        cap is not None
        and under_rubric - CriterionGrade.objects.filter(annotator=annotator).count() > cap
    ):
        left = cap + 1
    else:
        with connection.cursor() as cursor:
            cursor.execute(GRADED_IN_FULL_SQL, [annotator.pk, project.pk])
            (graded_in_full,) = cursor.fetchone()
        left = under_rubric - int(graded_in_full)
    return left if cap is None else min(left, cap + 1)


def _expert_rubric_responses(project: Project) -> QuerySet[Response]:
    # The expert rubric is the one without an origin; other expert rubrics are not graded here.
    return Response.objects.filter(
        project=project, task__rubrics__author_kind="expert", task__rubrics__origin=""
    )


def _criterion_grading_open(project: Project, annotator: Annotator) -> QuerySet[Response]:
    graded = CriterionGrade.objects.filter(
        response=OuterRef("pk"),
        annotator=annotator,
        item__rubric__author_kind="expert",
        item__rubric__origin="",
    )
    items = RubricItem.objects.filter(
        rubric__task=OuterRef("task"), rubric__author_kind="expert", rubric__origin=""
    )
    return (
        _expert_rubric_responses(project)
        .annotate(
            item_count=Subquery(
                items.values("rubric__task").annotate(n=Count("pk")).values("n")[:1]
            ),
            graded_count=Subquery(
                graded.values("response").annotate(n=Count("pk")).values("n")[:1]
            ),
        )
        .filter(Q(graded_count__isnull=True) | Q(graded_count__lt=F("item_count")))
        .annotate(
            early=Case(When(task__split__in=[Split.META, Split.SELECTION], then=0), default=1)
        )
        .order_by("early", "task__external_id", "external_id")
    )


def criterion_grading_view(
    *,
    response: Response,
    annotator: Annotator,
    unsaved: dict[int, tuple[bool, str]] | None = None,
) -> dict[str, Any]:
    """A response with its task and the expert rubric, each item with this annotator's mark;
    `unsaved` marks (from a refused submission) take precedence so nothing typed is lost."""
    task = Task.objects.only("prompt", "instructions").get(pk=response.task_id)
    rubric = Rubric.objects.get(task_id=response.task_id, author_kind="expert", origin="")
    marks = {
        grade.item_id: (grade.passed, grade.note)
        for grade in CriterionGrade.objects.filter(response=response, annotator=annotator)
    } | (unsaved or {})
    return {
        "response_pk": response.pk,
        "response": _response_view(response),
        "prompt": task.prompt,
        "instructions": task.instructions,
        "documents": list(Document.objects.filter(task_id=response.task_id).only("title", "text")),
        "items": [
            {
                "item": item,
                "passed": marks[item.pk][0] if item.pk in marks else None,
                "note": marks[item.pk][1] if item.pk in marks else "",
            }
            for item in rubric.items.all()
        ],
    }


def agreement_tally(*, project: Project) -> Tally:
    """Current pairwise labels of the project, counted as the agreement statistics read them."""
    return _tally(project, Preference.objects.filter(annotator__project=project, is_current=True))


def agreement_workloads(*, project: Project) -> Workloads:
    """Current human labels of the project counted by (annotator, confidence, seconds)."""
    return _workloads(Preference.objects.filter(annotator__project=project, is_current=True))


def agreement_panel(
    *, project: Project, user: AbstractBaseUser, dimension: str | None
) -> dict[str, Any]:
    """What a labeler sees of agreement: the panel figures of everyone else and their own
    workload. The user's labels and the others' are fetched apart, so nothing computed for the
    panel can read the viewer's labels (panel_report's docstring says why that matters)."""
    current = Preference.objects.filter(annotator__project=project, is_current=True)
    if dimension is not None:
        current = current.filter(dimension__name=dimension)
    # The viewer's labels are those of their annotator rows; exclude() keeps labels whose
    # annotator has no user (imported names), which are someone else's.
    own = current.filter(provider=Provider.HUMAN, annotator__user=user)
    others = current.filter(provider=Provider.HUMAN).exclude(annotator__user=user)
    own_counts: Counter[tuple[int | None, float | None]] = Counter()
    for (_, confidence, seconds), count in _workloads(own).items():
        own_counts[confidence, seconds] += count
    return {
        "panel": tally_panel_report(_tally(project, others), dimension=dimension),
        "own": workload(own_counts),
    }


# One current label as a number, so that the database can group an item's labels into an array
# of numbers cheaply: ((annotator * 3 + provider) * 3 + winner) * 4 + confidence, where the
# annotator is 0 unless human, winner 0 is the response of lower id, 1 the other, 2 a tie, and
# confidence 3 is none (the table's constraints keep provider and confidence to these).
_VOTE_CODE = """(
      (CASE WHEN p.provider = 'human' THEN COALESCE(p.annotator_id, 0) ELSE 0 END::bigint * 3
      + CASE p.provider WHEN 'human' THEN 0 WHEN 'synthetic' THEN 1 WHEN 'judge' THEN 2 END) * 3
      + CASE p.choice WHEN 'a' THEN (p.response_a_id > p.response_b_id)::int
                      WHEN 'b' THEN (p.response_b_id > p.response_a_id)::int ELSE 2 END) * 4
      + COALESCE(p.confidence, 3)"""
_PROVIDERS: tuple[AgreementProvider, ...] = ("human", "synthetic", "judge")
_WINNERS: tuple[Category, ...] = ("first", "second", "tie")


def _tally(project: Project, preferences: QuerySet[Preference]) -> Tally:
    """The database groups the labels into items, an item being a pair of responses (ids are
    unique within a project, as the external ids the statistics name are) and a dimension, and
    counts the items by their array of vote codes and by whether the response of lower id has
    the greater external id (then it is the pair's second, so its wins read "second").
    Elsewhere than on PostgreSQL the labels are loaded and counted in Python."""
    if connection.vendor != "postgresql":
        return tally(_labels(preferences))
    rows = _tally_rows(preferences)
    if not rows:
        return Counter()
    names = dict(Annotator.objects.filter(project=project).values_list("pk", "name"))
    dimensions = dict(Dimension.objects.filter(project=project).values_list("pk", "name"))
    counted: Tally = Counter()
    for dimension_id, codes, flipped, count in rows:
        # The database lists an item's votes in no set order: sorted here, the same vote sets
        # count together.
        votes = tuple(sorted((_vote(code, flipped, names) for code in codes), key=vote_order))
        counted[dimensions.get(dimension_id), votes] += count
    return counted


# How long grouped label rows stay in the cache: their key changes with any change to the labels
# they count, so this only bounds what a key collision could keep.
TALLY_CACHE_SECONDS = 600


def _tally_rows(preferences: QuerySet[Preference]) -> list[tuple[Any, ...]]:
    """_tally's grouped rows (dimension id, vote codes, flipped, items), from the cache when
    `preferences` holds the same labels as when they were grouped. Labels are never edited in
    place (an edit adds a row and retires the old one), so the count and the sum of the ids of
    the labels read say whether any was added, retired or deleted; reading them takes 20 ms
    at 100,000 labels where grouping takes 150 (bench/pages.py: the annotators and agreement
    pages)."""
    columns = ("response_a_id", "response_b_id", "dimension_id", "annotator_id", "provider")
    inner, params = preferences.values_list(
        *columns, "choice", "confidence"
    ).query.sql_with_params()
    held = preferences.aggregate(n=Count("pk"), ids=Sum("pk"))
    statement = hashlib.sha256(f"{inner}\n{params!r}".encode()).hexdigest()[:32]
    key = f"agreement-tally:{statement}:{held['n']}:{held['ids']}"
    rows: list[tuple[Any, ...]] | None = cache.get(key)
    if rows is not None:
        return rows
    sql = f"""
        SELECT i.dimension_id, i.votes,
               a.external_id COLLATE "C" > b.external_id COLLATE "C" AS flipped, count(*)
        FROM (SELECT LEAST(p.response_a_id, p.response_b_id) AS lo,
                     GREATEST(p.response_a_id, p.response_b_id) AS hi, p.dimension_id,
                     array_agg({_VOTE_CODE}) AS votes
              FROM ({inner}) p GROUP BY 1, 2, 3) i
        JOIN labeling_response a ON a.id = i.lo
        JOIN labeling_response b ON b.id = i.hi
        GROUP BY 1, 2, 3"""
    with transaction.atomic(), connection.cursor() as cursor:
        # The planner hashes all the responses of the database to find two per item (a third of
        # the time at 100,000 labels) and runs the grouping once per worker; merge joins on the
        # primary key in one process took 200-280 ms there against 450-600 (bench/pages.py).
        cursor.execute("SET LOCAL enable_hashjoin = off")
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        # SET LOCAL lasts until the outermost transaction ends, which may not be this one.
        cursor.execute("RESET enable_hashjoin")
        cursor.execute("RESET max_parallel_workers_per_gather")
    cache.set(key, rows, TALLY_CACHE_SECONDS)
    return rows


def _vote(code: int, flipped: bool, names: dict[int, str]) -> Vote:
    rest, confidence = divmod(code, 4)
    rest, winner = divmod(rest, 3)
    annotator, provider = divmod(rest, 3)
    if flipped and winner < 2:
        winner = 1 - winner
    return (
        names.get(annotator, ""),
        _PROVIDERS[provider],
        _WINNERS[winner],
        None if confidence == 3 else confidence,
    )


def _labels(preferences: QuerySet[Preference]) -> list[Label]:
    rows = preferences.values_list(
        "response_a__external_id",
        "response_b__external_id",
        "dimension__name",
        "annotator__name",
        "provider",
        "choice",
        "confidence",
        "seconds_spent",
    )
    labels = []
    for a, b, dimension, annotator, provider, choice, confidence, seconds in rows.iterator():
        labels.append(
            Label(
                pair=(a, b) if a < b else (b, a),
                dimension=dimension,
                annotator=annotator,
                provider=provider,
                winner={"a": a, "b": b}.get(choice),
                confidence=confidence,
                seconds=seconds,
            )
        )
    return labels


def _workloads(preferences: QuerySet[Preference]) -> Workloads:
    rows = (
        preferences.filter(provider=Provider.HUMAN)
        .values_list("annotator__name", "confidence", "seconds_spent")
        .annotate(count=Count("pk"))
        .order_by()
    )
    return Counter(
        {(name, confidence, seconds): count for name, confidence, seconds, count in rows}
    )
