"""Routes of the blind rubric audit."""

from django.urls import path

from reviews import audit_views

AUDIT = "p/<slug:slug>/audits/<int:audit_id>/"

urlpatterns = [
    path("p/<slug:slug>/audits/", audit_views.audits_page, name="audits"),
    path(AUDIT, audit_views.audit_page, name="audit"),
    path(AUDIT + "cancel/", audit_views.audit_cancel, name="audit-cancel"),
    path(AUDIT + "resume/", audit_views.audit_resume_view, name="audit-resume"),
    path(
        AUDIT + "verdicts/<int:verdict_id>/",
        audit_views.audit_verdict_page,
        name="audit-verdict",
    ),
]
