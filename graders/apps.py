from django.apps import AppConfig


class GradersConfig(AppConfig):
    name = "graders"
    verbose_name = "Graders"
