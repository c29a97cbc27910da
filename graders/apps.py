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
        from labeling.strategies import strategy_register

        strategy_register(WHICH_WINS)
        strategy_register(MONITORING)
        overview_alerts_register(drift_alerts)
