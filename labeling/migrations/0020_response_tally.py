"""ResponseTally: each task's response count, filled from the responses once and then kept by
triggers on labeling_response, so that every path that writes responses (the ORM, an import's
COPY, a capture's eviction, a cascade) keeps it without knowing of it.

On PostgreSQL the triggers run once per statement over its transition table, so a COPY import
of a million responses adds one grouped upsert, not a million single-row updates. SQLite has
row triggers only; its projects are the small ones."""

import django.db.models.deletion
from django.db import migrations, models

BACKFILL = """
    INSERT INTO labeling_responsetally (task_id, responses)
    SELECT task_id, count(*) FROM labeling_response GROUP BY task_id
"""

POSTGRESQL = """
CREATE FUNCTION labeling_response_tally_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO labeling_responsetally AS tally (task_id, responses)
    SELECT task_id, count(*) FROM added GROUP BY task_id ORDER BY task_id
    ON CONFLICT (task_id) DO UPDATE SET responses = tally.responses + excluded.responses;
    RETURN NULL;
END $$;
CREATE FUNCTION labeling_response_tally_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE labeling_responsetally AS tally SET responses = tally.responses - gone.n
    FROM (SELECT task_id, count(*) AS n FROM removed GROUP BY task_id) AS gone
    WHERE tally.task_id = gone.task_id;
    RETURN NULL;
END $$;
CREATE TRIGGER labeling_response_tally_insert AFTER INSERT ON labeling_response
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT
    EXECUTE FUNCTION labeling_response_tally_add();
CREATE TRIGGER labeling_response_tally_delete AFTER DELETE ON labeling_response
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT
    EXECUTE FUNCTION labeling_response_tally_remove();
"""

POSTGRESQL_DROP = """
DROP TRIGGER labeling_response_tally_insert ON labeling_response;
DROP TRIGGER labeling_response_tally_delete ON labeling_response;
DROP FUNCTION labeling_response_tally_add();
DROP FUNCTION labeling_response_tally_remove();
"""

SQLITE = [
    """CREATE TRIGGER labeling_response_tally_insert AFTER INSERT ON labeling_response
    BEGIN
        INSERT INTO labeling_responsetally (task_id, responses) VALUES (NEW.task_id, 1)
        ON CONFLICT (task_id) DO UPDATE SET responses = responses + 1;
    END""",
    """CREATE TRIGGER labeling_response_tally_delete AFTER DELETE ON labeling_response
    BEGIN
        UPDATE labeling_responsetally SET responses = responses - 1 WHERE task_id = OLD.task_id;
    END""",
]

SQLITE_DROP = [
    "DROP TRIGGER labeling_response_tally_insert",
    "DROP TRIGGER labeling_response_tally_delete",
]


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement, params=None)


def triggers_create(apps, schema_editor):
    postgresql = schema_editor.connection.vendor == "postgresql"
    _run(schema_editor, [BACKFILL, *([POSTGRESQL] if postgresql else SQLITE)])


def triggers_drop(apps, schema_editor):
    postgresql = schema_editor.connection.vendor == "postgresql"
    _run(schema_editor, [POSTGRESQL_DROP] if postgresql else SQLITE_DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0019_score_grade_project"),
    ]

    operations = [
        migrations.CreateModel(
            name="ResponseTally",
            fields=[
                (
                    "task",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="response_tally",
                        serialize=False,
                        to="labeling.task",
                    ),
                ),
                ("responses", models.PositiveIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(triggers_create, triggers_drop),
    ]
