from django.apps import AppConfig
from django.db.backends.signals import connection_created


class LabelingConfig(AppConfig):
    name = "labeling"
    verbose_name = "Labeling"

    def ready(self) -> None:
        from config.postgres_session import session_configure

        connection_created.connect(session_configure, dispatch_uid="postgres_session")
