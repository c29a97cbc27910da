"""A fresh PostgreSQL database for a benchmark run (default workbench_bench on the local
server), dropped and created anew so that leftovers of an earlier run cost nothing."""

import os

DEFAULT_URL = "postgres://workbench:workbench@127.0.0.1:5432/workbench_bench"


def bench_environment() -> None:
    """Settings as production runs them: DEBUG off, so no query log grows in memory."""
    os.environ.setdefault("DATABASE_URL", DEFAULT_URL)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def bench_database_fresh() -> str:
    """Recreate the database named by DATABASE_URL (PostgreSQL only) and migrate it; return
    the vendor. Call after django.setup()."""
    import psycopg
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor == "postgresql":
        connection.close()
        settings = connection.settings_dict
        with psycopg.connect(
            host=str(settings["HOST"] or "127.0.0.1"),
            port=int(str(settings["PORT"] or 5432)),
            user=str(settings["USER"]),
            password=str(settings["PASSWORD"] or ""),
            dbname="postgres",
            autocommit=True,
        ) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{settings["NAME"]}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{settings["NAME"]}"')
    call_command("migrate", verbosity=0)
    return str(connection.vendor)
