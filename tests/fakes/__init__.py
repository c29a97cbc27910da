"""Fakes of external services for tests; nothing here reaches the internet."""
