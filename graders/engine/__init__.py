"""The grading engine: pure Python, importable by training jobs with no Django and no database.

Nothing below this package may import django, rest_framework or celery; a test enforces it.
"""
