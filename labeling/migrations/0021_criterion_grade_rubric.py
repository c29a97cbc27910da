"""CriterionGrade repeats its item's rubric, so that an annotator's grades group by rubric and
response from one index (annotator, rubric, response) without joining the items. That index
leads with the annotator, so the annotator's own index goes. Filled from the items in one
UPDATE ... FROM, then made required."""

import django.db.models.deletion
from django.db import migrations, models

BACKFILL = """
    UPDATE labeling_criteriongrade SET rubric_id = (
        SELECT i.rubric_id FROM labeling_rubricitem AS i WHERE i.id = labeling_criteriongrade.item_id
    )
"""


def _rubric_field(*, null: bool) -> models.ForeignKey:
    return models.ForeignKey(
        null=null,
        on_delete=django.db.models.deletion.CASCADE,
        related_name="+",
        to="labeling.rubric",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0020_response_tally"),
    ]

    operations = [
        migrations.AddField(
            model_name="criteriongrade", name="rubric", field=_rubric_field(null=True)
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="criteriongrade", name="rubric", field=_rubric_field(null=False)
        ),
        migrations.AlterField(
            model_name="criteriongrade",
            name="annotator",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                to="labeling.annotator",
            ),
        ),
        migrations.AddIndex(
            model_name="criteriongrade",
            index=models.Index(
                fields=["annotator", "rubric", "response"], name="criterion_grade_annotator"
            ),
        ),
    ]
