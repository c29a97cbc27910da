from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", include("labeling.api_urls")),
    path("api/", include("graders.api_urls")),
    path("", include("graders.token_urls")),
    path("", include("graders.urls")),
    path("", include("graders.synthesis.urls")),
    path("", include("reviews.urls")),
    path("", include("reviews.audit_urls")),
    path("", include("labeling.urls")),
]
