"""Routes of rubric review: generation, the review page and inline editing."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
