"""A large project for the benchmarks, written with set-based SQL (INSERT ... SELECT over
generate_series): 1.1 million ORM inserts would dominate any run, so only the handful of rows
whose shape a service owns (graders, tokens, searches) go through the product's code.

`seed_queue_project` is the base every large bench shares: tasks (a fifth meta, a tenth each
selection and eval, the rest train, in five domains), `per_task` responses each and one queued
pair per task with `overlap` slots. `seed_pages_rows` adds to it what the list and overview
pages read at that scale: members of each role and their labels on half of the queued pairs,
true scores, expert rubrics with criterion grades, generated rubrics, flags, jobs and
notifications, searches with graded candidates and one promoted grader with grades, captured
rollouts, an audit, a synthesis with its run and sweep, tokens and settings changes."""

from dataclasses import dataclass
from typing import Any

# Split by task number: g % 10 < 2 meta, 2 selection, 3 eval, the rest train.
SPLIT_SQL = """CASE WHEN g %% 10 < 2 THEN 'meta' WHEN g %% 10 = 2 THEN 'selection'
                    WHEN g %% 10 = 3 THEN 'eval' ELSE 'train' END"""
EXPERTS = 10  # annotators with a login besides the admin; the first is the bench's expert
PASSWORD = "bench-pages-1"


def seed_queue_project(*, slug: str, name: str, tasks: int, per_task: int, overlap: int) -> int:
    """A project with `tasks` tasks of `per_task` responses and one queued pair per task (its
    first two responses) with `overlap` open slots; returns the project's id."""
    from django.db import connection, transaction

    from labeling.models import Project

    project = Project.objects.create(slug=slug, name=name, overlap=overlap)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO labeling_task (project_id, external_id, domain, prompt, instructions,
                   metadata, split)
               SELECT %s, 't' || g, 'd' || (g %% 5), 'Prompt ' || g, '', '{{}}', {SPLIT_SQL}
               FROM generate_series(1, %s) AS g""",
            [project.pk, tasks],
        )
        cursor.execute(
            """INSERT INTO labeling_response (project_id, task_id, external_id, content,
                   source_model, metadata)
               SELECT t.project_id, t.id, t.external_id || '/r' || r,
                      'Response ' || r || ' to ' || t.external_id, 'm' || (r %% 3), '{}'
               FROM labeling_task t CROSS JOIN generate_series(0, %s) AS r
               WHERE t.project_id = %s""",
            [per_task - 1, project.pk],
        )
        cursor.execute(
            """INSERT INTO labeling_queuepair (project_id, task_id, response_a_id,
                   response_b_id, dimension_id, block, priority, strategy)
               SELECT %s, task_id, min(id), min(id) + 1, NULL, 0, random(), 'bench'
               FROM labeling_response WHERE project_id = %s GROUP BY task_id""",
            [project.pk, project.pk],
        )
        cursor.execute(
            """INSERT INTO labeling_queueslot (pair_id, project_id, block, priority)
               SELECT id, project_id, block, priority FROM labeling_queuepair
               CROSS JOIN generate_series(1, %s) AS copy
               WHERE project_id = %s""",
            [overlap, project.pk],
        )
        cursor.execute("ANALYZE")
    return int(project.pk)


@dataclass
class PagesSeed:
    """What the page bench needs to address its pages: the logins per role and the ids of
    one row of each kind that has a page of its own."""

    slug: str
    users: dict[str, Any]  # role -> User
    ids: dict[str, Any]


def seed_pages_rows(*, project_id: int) -> PagesSeed:
    """Everything the list and overview pages read, on top of seed_queue_project's rows."""
    from django.db import connection, transaction

    from labeling.models import Project

    project = Project.objects.get(pk=project_id)
    with transaction.atomic():
        users, annotators = _members(project)
        with connection.cursor() as cursor:
            _labels(cursor, project_id, annotators)
            _expert_data(cursor, project_id, annotators[0])
            _flags_jobs_notifications(cursor, project_id, annotators, users["admin"].pk)
        ids = _graders(project, users["admin"])
        ids |= _reviews_and_synthesis(project, users["admin"], ids["endpoint"])
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return PagesSeed(project.slug, users, ids)


def _members(project: Any) -> tuple[dict[str, Any], list[int]]:
    """An admin, a reviewer and EXPERTS experts, each an annotator (the admin too): the
    annotator ids, the bench's expert first."""
    from django.contrib.auth.models import User

    from labeling.models import Annotator, Dimension, Membership, ProjectChange, Role

    users = {}
    roles = [("admin", Role.ADMIN), ("reviewer", Role.REVIEWER)]
    roles += [(f"expert{n}" if n else "expert", Role.EXPERT) for n in range(EXPERTS)]
    for name, role in roles:
        user = User.objects.create_user(username=f"bench-{name}", password=PASSWORD)
        Membership.objects.create(user=user, project=project, role=role)
        users[name] = user
    User.objects.filter(pk=users["admin"].pk).update(is_staff=True)
    labelers = ["expert", *(f"expert{n}" for n in range(1, EXPERTS)), "admin"]
    annotators = [
        Annotator.objects.create(project=project, name=name, user=users[name]).pk
        for name in labelers
    ]
    for name in ("helpfulness", "accuracy"):
        Dimension.objects.create(project=project, name=name, description=f"How {name} it is.")
    ProjectChange.objects.bulk_create(
        ProjectChange(project=project, user=users["admin"], kind="settings",
                      subject="overlap", detail={"overlap": [n, n + 1]})
        for n in range(200)
    )  # fmt: skip
    return users, annotators


def _labels(cursor: Any, project_id: int, annotators: list[int]) -> None:
    """Half of the queued pairs (those of even task ids) labeled in every slot, each slot by a
    different annotator; the labels are human preferences with their assignments."""
    cursor.execute(
        """CREATE TEMP TABLE bench_labeled ON COMMIT DROP AS
           SELECT s.id AS slot_id, p.id AS pair_id, p.task_id, p.response_a_id,
                  p.response_b_id,
                  (%s::int[])[1 + (p.task_id + k) %% %s] AS annotator_id
           FROM (SELECT id, pair_id, row_number() OVER (PARTITION BY pair_id ORDER BY id) AS k
                 FROM labeling_queueslot WHERE project_id = %s) s
           JOIN labeling_queuepair p ON p.id = s.pair_id
           WHERE p.task_id %% 2 = 0""",
        [annotators, len(annotators), project_id],
    )
    cursor.execute(
        """UPDATE labeling_queueslot s SET done_at = now(), claimed_by_id = l.annotator_id
           FROM bench_labeled l WHERE s.id = l.slot_id"""
    )
    cursor.execute(
        """INSERT INTO labeling_queueassignment (pair_id, annotator_id, slot_id, slot_order,
               served_at, submitted_at)
           SELECT pair_id, annotator_id, slot_id,
                  CASE WHEN slot_id %% 2 = 0 THEN 'ab' ELSE 'ba' END,
                  now() - (slot_id %% 10000) * interval '1 minute',
                  now() - (slot_id %% 10000) * interval '1 minute' + interval '30 seconds'
           FROM bench_labeled""",
        [],
    )
    cursor.execute(
        """INSERT INTO labeling_preference (task_id, response_a_id, response_b_id, choice,
               confidence, provider, annotator_id, slot_order, seconds_spent, is_current,
               created_at)
           SELECT task_id, response_a_id, response_b_id,
                  (ARRAY['a', 'b', 'tie'])[1 + (task_id + annotator_id) %% 3],
                  (task_id + slot_id) %% 3, 'human', annotator_id,
                  CASE WHEN slot_id %% 2 = 0 THEN 'ab' ELSE 'ba' END, 30, true,
                  now() - (slot_id %% 10000) * interval '1 minute'
           FROM bench_labeled""",
        [],
    )


def _expert_data(cursor: Any, project_id: int, grader_annotator: int) -> None:
    """True scores on every response of the meta and selection tasks; an expert rubric of
    three criteria on each meta task, its first two responses graded on them; a generated
    rubric on a thousand selection tasks."""
    cursor.execute(
        """INSERT INTO labeling_score (project_id, response_id, provider, value)
           SELECT r.project_id, r.id, 'true_grader', (r.id %% 101) / 100.0
           FROM labeling_response r JOIN labeling_task t ON t.id = r.task_id
           WHERE t.project_id = %s AND t.split IN ('meta', 'selection')""",
        [project_id],
    )
    for author, origin, split, limit in (
        ("expert", "", "meta", None),
        ("generated", "bench-rubric-writer", "selection", 1000),
    ):
        cursor.execute(
            f"""INSERT INTO labeling_rubric (task_id, author_kind, origin, version, updated_at)
                SELECT id, %s, %s, 1, now() FROM labeling_task
                WHERE project_id = %s AND split = %s ORDER BY id
                {"LIMIT " + str(limit) if limit else ""}""",
            [author, origin, project_id, split],
        )
    cursor.execute(
        """INSERT INTO labeling_rubricitem (rubric_id, key, text, weight, position)
           SELECT rb.id, 'c' || n, 'Criterion ' || n || ' of ' || t.external_id, n, n
           FROM labeling_rubric rb JOIN labeling_task t ON t.id = rb.task_id
           CROSS JOIN generate_series(1, 3) AS n WHERE t.project_id = %s""",
        [project_id],
    )
    cursor.execute(
        """INSERT INTO labeling_rubricrevision (rubric_id, version, items, editor, created_at)
           SELECT rb.id, 1, '[]', '', now()
           FROM labeling_rubric rb JOIN labeling_task t ON t.id = rb.task_id
           WHERE t.project_id = %s""",
        [project_id],
    )
    cursor.execute(
        """INSERT INTO labeling_criteriongrade (project_id, response_id, item_id, passed,
               annotator_id, note, created_at)
           SELECT r.project_id, r.id, i.id, (r.id + i.id) %% 3 > 0, %s, '', now()
           FROM labeling_rubric rb JOIN labeling_task t ON t.id = rb.task_id
           JOIN labeling_rubricitem i ON i.rubric_id = rb.id
           JOIN labeling_queuepair p ON p.task_id = t.id
           JOIN labeling_response r ON r.id IN (p.response_a_id, p.response_b_id)
           WHERE t.project_id = %s AND rb.author_kind = 'expert'""",
        [grader_annotator, project_id],
    )


def _flags_jobs_notifications(
    cursor: Any, project_id: int, annotators: list[int], admin_id: int
) -> None:
    """A thousand flagged pairs among the unlabeled (half resolved), 3,000 finished jobs of the
    project and a notification of each to the admin (a third unread)."""
    cursor.execute(
        """INSERT INTO labeling_pairflag (pair_id, annotator_id, reason, note, created_at,
               resolved_at)
           SELECT p.id, (%s::int[])[1 + p.id %% %s],
                  (ARRAY['identical', 'unclear', 'offensive', 'other'])[1 + p.id %% 4],
                  'Flag note ' || p.id, now() - p.id * interval '1 second',
                  CASE WHEN p.id %% 2 = 0 THEN now() END
           FROM labeling_queuepair p WHERE p.project_id = %s AND p.task_id %% 2 = 1
           ORDER BY p.id LIMIT 1000""",
        [annotators, len(annotators), project_id],
    )
    cursor.execute(
        """INSERT INTO labeling_job (project_id, kind, status, params, stage, result, done,
               total, cost, error, cancel_requested, created_by_id, created_at, started_at,
               finished_at, owner)
           SELECT %s, (ARRAY['import', 'grading', 'search', 'audit'])[1 + g %% 4],
                  (ARRAY['succeeded', 'failed', 'cancelled', 'succeeded'])[1 + g %% 4],
                  '{}', '', '{}', 10, 10, 0.01 * g, '', false, %s,
                  now() - g * interval '1 minute', now() - g * interval '1 minute',
                  now() - g * interval '1 minute' + interval '20 seconds', ''
           FROM generate_series(1, 3000) AS g""",
        [project_id, admin_id],
    )
    cursor.execute(
        """INSERT INTO labeling_notification (user_id, job_id, text, created_at, read_at)
           SELECT %s, id, kind || ' #' || id || ' ' || status, finished_at,
                  CASE WHEN id %% 3 > 0 THEN finished_at END
           FROM labeling_job WHERE project_id = %s""",
        [admin_id, project_id],
    )


def _graders(project: Any, admin: Any) -> dict[str, Any]:
    """The baselines, a judge, three finished searches of four graded candidates, the best
    of the last promoted (selection and alias) with its grades on every response of the
    selection split, captured rollouts graded by it, and tokens that used it."""
    from django.db import connection

    from graders.models import (
        Candidate,
        GradingRun,
        JudgeEndpoint,
        RewardUsage,
        SearchRun,
    )
    from graders.services import baselines_ensure, grader_promote, metagrader_register
    from graders.tokens import token_create
    from labeling.models import Job
    from labeling.snapshots import label_snapshot_take

    baseline = next(g for g in baselines_ensure(project=project) if g.kind == "scalar")
    endpoint = JudgeEndpoint.objects.create(
        project=project, name="bench-judge", base_url="https://judge.example/v1",
        model="judge-1", is_default=True,
    )  # fmt: skip
    snapshot = label_snapshot_take(project=project)

    def finished(kind: str) -> Job:
        return Job.objects.create(
            project=project, kind=kind, status="succeeded", done=4, total=4, created_by=admin
        )

    def evaluation(value: float) -> dict[str, Any]:
        metric = {"value": value, "ci": [round(value - 0.1, 3), round(value + 0.05, 3)]}
        return {
            "reference": "human_majority", "pairs": 5000, "tasks": 2500, "graded": 50000,
            "failed": 0, "tolerance": 0.1, "tolerant_ranking_accuracy": metric,
            "ranking_accuracy": metric, "within_task_spearman": metric,
        }  # fmt: skip

    for number in range(3):
        search = SearchRun.objects.create(
            project=project, job=finished("search"), kind="scalar", mode="best_of_n",
            endpoint=endpoint, n=4, usage={"calls": 400, "cost": 1.0}, snapshot=snapshot,
        )  # fmt: skip
        candidates = []
        for position in range(4):
            program = baseline.program | {"name": f"search {number} candidate {position}"}
            program["steps"] = [dict(step) for step in program["steps"]]
            program["steps"][0]["prompt"] += f"\nVariant {number}.{position}"
            grader = metagrader_register(project=project, program=program, origin="search")
            run = GradingRun.objects.create(
                project=project, metagrader=grader, endpoint=endpoint, split="selection",
                job=finished("grading"), search=search,
                evaluation=evaluation(0.6 + 0.03 * position),
            )  # fmt: skip
            candidate = Candidate.objects.create(
                search=search, metagrader=grader, iteration=0, position=position,
                status="graded", score=0.6 + 0.03 * position, calls_per_response=1.0,
                lineage="mutation of the baseline", selection_run=run,
            )  # fmt: skip
            candidates.append(candidate)
        winner = candidates[-1]
        search.winner = winner
        search.curve = [
            {"iteration": 0, "candidate": winner.pk, "name": winner.metagrader.name,
             "selection": 0.69, "selection_ci": [0.6, 0.75], "eval": 0.66,
             "eval_ci": [0.6, 0.7], "candidates": 4},
        ]  # fmt: skip
        search.save(update_fields=["winner", "curve"])
    grader = winner.metagrader
    grader_promote(project=project, metagrader=grader, user=admin, search=search)
    from graders.aliases import alias_promote

    alias_promote(project=project, name="production", metagrader=grader, user=admin)
    run = winner.selection_run
    tokens = [
        token_create(project=project, name=f"trainer {n}", scopes=["reward", "capture"],
                     user=admin)[0]
        for n in range(3)
    ]  # fmt: skip
    for token in tokens:
        RewardUsage.objects.create(metagrader=grader, token=token, requests=1000, responses=8000)
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO graders_grade (run_id, response_id, reward, error, criteria, trace,
                   created_at)
               SELECT %s, r.id, (r.id %% 97) / 96.0, '', '[]',
                      '[{"step_id": "score", "text": "{}", "parsed": {"score": 0.5}}]', now()
               FROM labeling_response r JOIN labeling_task t ON t.id = r.task_id
               WHERE t.project_id = %s AND t.split = 'selection'""",
            [run.pk, project.pk],
        )
        # Two thousand train tasks: their last four responses came back as one captured group.
        cursor.execute(
            """INSERT INTO graders_capturedgroup (project_id, task_id, slot, source,
                   metagrader_id, token_id, run, step, created_at)
               SELECT project_id, id, 0, 'reward', %s, %s, 'ppo-1', id %% 500,
                      now() - id * interval '1 second'
               FROM labeling_task WHERE project_id = %s AND split = 'train'
               ORDER BY id LIMIT 2000""",
            [grader.pk, tokens[0].pk, project.pk],
        )
        cursor.execute(
            """INSERT INTO graders_capturedresponse (group_id, response_id, task_id,
                   content_hash, reward, position)
               SELECT g.id, r.id, r.task_id, md5(r.external_id),
                      (r.id %% 89) / 88.0, row_number() OVER (PARTITION BY g.id ORDER BY r.id)
               FROM graders_capturedgroup g
               JOIN labeling_response r ON r.task_id = g.task_id
               WHERE g.project_id = %s AND r.external_id ~ '/r[6-9]$'""",
            [project.pk],
        )
        cursor.execute(
            """INSERT INTO graders_capturereservoir (task_id, groups_seen)
               SELECT task_id, 3 FROM graders_capturedgroup WHERE project_id = %s""",
            [project.pk],
        )
    grade = run.grades.order_by("pk").first()
    return {
        "endpoint": endpoint, "search": search.pk, "candidate": winner.pk, "grader": grader.pk,
        "run": run.pk, "grade": grade.pk if grade else None, "job": run.job_id,
    }  # fmt: skip


def _reviews_and_synthesis(project: Any, admin: Any, endpoint: Any) -> dict[str, Any]:
    """An audit of the generated rubrics' criteria and as many expert ones, and a synthesis
    (cells on two thousand train tasks, a draw each, two votes per draw) with its run and a
    sweep."""
    from django.db import connection

    from graders.models import SynthesisRun, SynthesisSweep
    from labeling.models import Dimension, Job, Synthesis
    from reviews.models import AuditRun, AuditVerdict

    def finished(kind: str) -> Job:
        return Job.objects.create(
            project=project, kind=kind, status="succeeded", done=4, total=4, created_by=admin
        )

    audit = AuditRun.objects.create(
        project=project, job=finished("audit"), endpoint=endpoint, split="selection",
        created_by=admin,
    )  # fmt: skip
    synthesis = Synthesis.objects.create(
        project=project, external_id="bench-synthesis", judges=["j1", "j2"]
    )
    dimension = Dimension.objects.filter(project=project).order_by("pk").first()
    assert dimension is not None
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO reviews_auditverdict (run_id, rubric_item_id, task_id, author_kind,
                   criterion_text, specificity, grounding, quote, omission, quote_missing,
                   error, trace, created_at)
               SELECT %s, i.id, rb.task_id, rb.author_kind, i.text,
                      (ARRAY['specific', 'generic'])[1 + i.id %% 2],
                      (ARRAY['supported', 'contradicted', 'unverifiable'])[1 + i.id %% 3],
                      '', i.id %% 5 = 0, false, '', '{}', now()
               FROM labeling_rubricitem i JOIN labeling_rubric rb ON rb.id = i.rubric_id
               JOIN labeling_task t ON t.id = rb.task_id
               WHERE t.project_id = %s AND (rb.author_kind = 'generated' OR rb.task_id IN
                   (SELECT task_id FROM labeling_rubric WHERE author_kind = 'expert'
                    ORDER BY task_id LIMIT 1000))""",
            [audit.pk, project.pk],
        )
        cursor.execute(
            """INSERT INTO reviews_auditrun_tasks (auditrun_id, task_id)
               SELECT DISTINCT run_id, task_id FROM reviews_auditverdict WHERE run_id = %s""",
            [audit.pk],
        )
        cursor.execute(
            """INSERT INTO labeling_synthesiscell (synthesis_id, external_id, task_id,
                   dimension_id, low_level, high_level, agent, steering, error)
               SELECT %s, 'cell-' || t.id, t.id, %s,
                      CASE WHEN t.id %% 3 = 2 THEN 'ok' ELSE 'bad' END,
                      CASE WHEN t.id %% 3 = 0 THEN 'ok' ELSE 'good' END,
                      'agent-' || (t.id %% 2), '{}', ''
               FROM labeling_task t WHERE t.project_id = %s AND t.split = 'train'
               ORDER BY t.id LIMIT 2000""",
            [synthesis.pk, dimension.pk, project.pk],
        )
        cursor.execute(
            """INSERT INTO labeling_synthesisdraw (cell_id, retry, low_response_id,
                   high_response_id, outcome, cost, error, validation_sampled, usage, held)
               SELECT c.id, 0, p.response_a_id, p.response_b_id,
                      CASE WHEN c.id %% 4 = 0 THEN 'vetoed' ELSE 'kept' END, 0.01, '',
                      c.id %% 10 = 0, '{}', '{}'
               FROM labeling_synthesiscell c JOIN labeling_queuepair p ON p.task_id = c.task_id
               WHERE c.synthesis_id = %s""",
            [synthesis.pk],
        )
        cursor.execute(
            """INSERT INTO labeling_synthesisvote (draw_id, position, judge, agrees,
                   slot_order, answers)
               SELECT d.id, n, 'j' || (n + 1), NOT (d.outcome = 'vetoed' AND n = 1), 'ab', '[]'
               FROM labeling_synthesisdraw d JOIN labeling_synthesiscell c ON c.id = d.cell_id
               CROSS JOIN generate_series(0, 1) AS n WHERE c.synthesis_id = %s""",
            [synthesis.pk],
        )
    synthesis_run = SynthesisRun.objects.create(
        project=project, synthesis=synthesis, job=finished("synthesis"), writer=endpoint,
        created_by=admin, split="train",
    )  # fmt: skip
    synthesis_run.agents.set([endpoint])
    synthesis_run.dimensions.set([dimension])
    sweep = SynthesisSweep.objects.create(
        project=project, synthesis=synthesis, job=finished("synthesis_sweep"),
        evaluators=[{"name": "bench-judge", "endpoint": endpoint.pk, "metagrader": None}],
    )  # fmt: skip
    verdict = AuditVerdict.objects.filter(run=audit).order_by("pk").first()
    rubric_task = project.tasks.filter(rubrics__author_kind="generated").order_by("pk").first()
    return {
        "audit": audit.pk, "verdict": verdict.pk if verdict else None,
        "rubric_task": rubric_task.external_id if rubric_task else "t1",
        "synthesis": synthesis.pk, "synthesis_run": synthesis_run.pk, "sweep": sweep.pk,
        "task": "t1",
    }  # fmt: skip
