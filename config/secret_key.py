"""The secret key when SECRET_KEY is not set: one random key per installation, made on first
start and kept in the var folder, readable by its owner only, so that no published key ever
signs a session and every process of one machine (web, worker, manage.py) signs alike."""

import os
import secrets
from pathlib import Path


def secret_key_kept(path: Path) -> str:
    """The key in `path`, made first if there is none. Two processes starting together each
    write a candidate and link it into place; the link that lands first is the key for both."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        candidate = path.with_name(f".{path.name}.{os.getpid()}")
        descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_urlsafe(50))
        try:
            os.link(candidate, path)
        except FileExistsError:
            pass
        finally:
            candidate.unlink()
    return path.read_text().strip()
