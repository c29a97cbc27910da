from typing import Any

from django.apps import AppConfig


class GradersConfig(AppConfig):
    name = "graders"
    verbose_name = "Graders"

    def ready(self) -> None:
        # Registered from here because labeling, which owns the queue, never imports graders.
        from graders.active.monitoring import MONITORING
        from graders.active.strategy import WHICH_WINS
        from graders.drift import drift_alerts
        from labeling.overview_panels import overview_alerts_register
        from labeling.signals import label_submitted
        from labeling.strategies import strategy_register

        strategy_register(WHICH_WINS)
        strategy_register(MONITORING)
        overview_alerts_register(drift_alerts)
        label_submitted.connect(_labels_watch, dispatch_uid="graders.research_watch")


def _labels_watch(sender: object, project: Any, **_: object) -> None:
    """A label arrived: let the automatic re-search policy look at drift (graders/research.py)."""
    from graders.research import research_watch_soon

    research_watch_soon(project)
