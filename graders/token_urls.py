from django.urls import path

from graders import token_views

urlpatterns = [
    path("p/<slug:slug>/tokens/", token_views.tokens_page, name="api-tokens"),
    path("p/<slug:slug>/api-docs/", token_views.api_docs_page, name="api-docs"),
    path(
        "p/<slug:slug>/tokens/<int:token_id>/revoke/",
        token_views.token_revoke_view,
        name="api-token-revoke",
    ),
]
