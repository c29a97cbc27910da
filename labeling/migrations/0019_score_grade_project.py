"""Score and CriterionGrade repeat their response's project, so that the project home counts
a project's scores and grades without joining its responses. Filled from the responses in one
UPDATE ... FROM per table, then made required."""

import django.db.models.deletion
from django.db import migrations, models

BACKFILL = """
    UPDATE {table} AS row SET project_id = r.project_id
    FROM labeling_response AS r WHERE r.id = row.response_id
"""


def _project_field(*, null: bool) -> models.ForeignKey:
    return models.ForeignKey(
        null=null,
        on_delete=django.db.models.deletion.CASCADE,
        related_name="+",
        to="labeling.project",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0018_response_trajectory_index"),
    ]

    operations = [
        migrations.AddField(model_name="score", name="project", field=_project_field(null=True)),
        migrations.RunSQL(BACKFILL.format(table="labeling_score"), migrations.RunSQL.noop),
        migrations.AlterField(model_name="score", name="project", field=_project_field(null=False)),
        migrations.AddField(
            model_name="criteriongrade", name="project", field=_project_field(null=True)
        ),
        migrations.RunSQL(BACKFILL.format(table="labeling_criteriongrade"), migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="criteriongrade", name="project", field=_project_field(null=False)
        ),
    ]
