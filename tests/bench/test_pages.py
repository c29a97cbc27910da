"""bench/pages.py on a tiny seed, so the script and its seed cannot rot: every page it times
answers 200 and its report names each one. PostgreSQL only (the seed is set-based SQL)."""

import pytest
from django.db import connection

from bench.pages import pages, pages_time, report
from bench.seed_large import seed_pages_rows, seed_queue_project

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="bench/seed_large.py writes PostgreSQL's SQL"
)


@pytest.mark.django_db
def test_one_pass_over_every_page_answers_200_and_is_reported() -> None:
    project_id = seed_queue_project(slug="bench-pages", name="Pages", tasks=200, per_task=10,
                                    overlap=2)  # fmt: skip
    seeded = seed_pages_rows(project_id=project_id)

    timings = pages_time(seeded, repeat=1, warmup=0)

    planned = pages(seeded)
    assert len(timings) == len(planned) > 30
    assert {(t.page.name, t.page.role) for t in timings} == {(p.name, p.role) for p in planned}
    assert [(t.page.path, t.status) for t in timings if t.status != 200] == []
    assert all(t.queries > 0 for t in timings)
    assert all(t.first_ms > 0 for t in timings)  # the cold request is timed too
    lines = report(timings)
    table = "\n".join(lines)
    assert "first ms" in lines[0]
    for page in planned:
        assert f"{page.name:<22} {page.role:<9}  200" in table
        assert page.path in table
    assert lines[-1].startswith("slowest three: ")
    assert "ratio" in lines[-2]
