"""config/postgres_session.py: every PostgreSQL session the app opens runs with JIT off."""

import pytest
from django.db import connection, connections


@pytest.mark.django_db
def test_a_new_session_has_jit_off() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("JIT is a PostgreSQL setting; this run is on " + connection.vendor)
    session = connections.create_connection("default")  # a session of its own, opened now
    try:
        with session.cursor() as cursor:
            cursor.execute("SHOW jit")
            assert cursor.fetchone() == ("off",)
    finally:
        session.close()
