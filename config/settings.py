"""Settings for the grading workbench, all taken from environment variables.

The defaults run a fresh checkout on SQLite and a file-system Celery broker, so nothing needs a
server. DATABASE_URL and CELERY_BROKER_URL switch to PostgreSQL and Redis or RabbitMQ.
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from config.secret_key import secret_key_kept
from graders.engine.egress import DEFAULT_KEY_HOSTS

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("WORKBENCH_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# Unset: a random key kept in var/secret_key (config/secret_key.py). Web processes on several
# hosts must share one: set it. The development key earlier versions published is refused.
PUBLISHED_SECRET_KEY = "insecure-development-key-change-me"
SECRET_KEY = os.environ.get("SECRET_KEY") or secret_key_kept(VAR_DIR / "secret_key")
# Off unless set: its pages show tracebacks, settings and URL patterns. `make run` sets DEBUG=1.
DEBUG = env_bool("DEBUG", False)
if not DEBUG and SECRET_KEY == PUBLISHED_SECRET_KEY:
    raise ImproperlyConfigured(
        "DEBUG is off and SECRET_KEY is the published development key: set SECRET_KEY to a "
        "long random value, or leave it unset for a key kept in var/secret_key."
    )
# Debug pages mask URL passwords (scheme://user:password@) in every setting and variable.
DEFAULT_EXCEPTION_REPORTER_FILTER = "config.debug_pages.UrlPasswordFilter"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "rest_framework",
    # Swagger UI's files for the API docs page (graders/token_views.api_docs_page), served
    # from our own static files: no CDN.
    "drf_spectacular_sidecar",
    "labeling",
    "graders",
    "reviews",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.debug_pages.DebugNotFoundForStaffMiddleware",
    "config.login_throttle.LoginLockedMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csp",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "labeling.notification_badge.unread_notifications",
            ],
        },
    },
]

# SQLite is the embedded default. The web process and the worker write at the same time, so
# writers take the lock at BEGIN (IMMEDIATE) and wait for it instead of failing on upgrade.
SQLITE_PATH = VAR_DIR / "workbench.sqlite3"
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{SQLITE_PATH}"),
        conn_max_age=int(os.environ.get("CONN_MAX_AGE", 0)),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    SQLITE_PATH.parent.mkdir(parents=True, exist_ok=True)
    # A file, not memory, so that a worker process in the tests can open the same database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Logins (the app's and the admin's) go through a backend that counts wrong passwords in the
# cache, per user name and per client address; past the limit every login for it is refused
# with 429 for LOGIN_LOCKOUT_SECONDS. 0 turns a limit off (behind a reverse proxy every client
# shares REMOTE_ADDR, so the per-address limit would count them together).
AUTHENTICATION_BACKENDS = ["config.login_throttle.ThrottledModelBackend"]
LOGIN_FAILURES_PER_USERNAME = int(os.environ.get("LOGIN_FAILURES_PER_USERNAME", 5))
LOGIN_FAILURES_PER_IP = int(os.environ.get("LOGIN_FAILURES_PER_IP", 20))
LOGIN_LOCKOUT_SECONDS = int(os.environ.get("LOGIN_LOCKOUT_SECONDS", 15 * 60))
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "project-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
MEDIA_ROOT = Path(os.environ.get("MEDIA_ROOT", VAR_DIR / "media"))

# Where judge calls may go and which keys they may carry (graders/engine/egress.py): a project
# admin writes the endpoint, but the call leaves from the operator's machines with the
# operator's keys. Key variables: these names, or any starting with the prefix (otherwise an
# admin could send SECRET_KEY or DATABASE_URL), each sent only to the hosts it is bound to:
# the providers' variables to their API hosts, and JUDGE_API_KEY_HOSTS entries
# ("JUDGE_KEY_VLLM=10.0.0.5:8000", a variable may repeat) replacing a variable's binding.
JUDGE_API_KEY_ENV_ALLOWED = env_list("JUDGE_API_KEY_ENV_ALLOWED", ",".join(DEFAULT_KEY_HOSTS))
JUDGE_API_KEY_ENV_PREFIX = os.environ.get("JUDGE_API_KEY_ENV_PREFIX", "JUDGE_KEY_")
JUDGE_API_KEY_HOSTS = env_list("JUDGE_API_KEY_HOSTS", "")
# Loopback, private and other non-public addresses are refused, except exactly these
# host:port pairs (`make run` adds its local judge, 127.0.0.1:8089).
JUDGE_PRIVATE_HOSTS = env_list("JUDGE_PRIVATE_HOSTS", "")
# Public hosts judge endpoints may point at, port-aware ("api.openai.com" is its https port;
# "host:8000" names one); empty: any public host.
JUDGE_BASE_URL_HOSTS = env_list("JUDGE_BASE_URL_HOSTS", "")

# Email, through Django's mailers: SMTP at EMAIL_HOST (default localhost, as Django's own
# default; EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS), or the backend
# EMAIL_BACKEND names (django.core.mail.backends.console.EmailBackend for development). A user
# is told by email too when a job they started stops (labeling/notifications.py) if
# NOTIFY_BY_EMAIL is on, as it is once EMAIL_HOST is set; the links in those emails start with
# SITE_URL (https://workbench.example.org).
_SMTP_HOST = os.environ.get("EMAIL_HOST", "")
_SMTP = {
    "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
    "OPTIONS": {
        "host": _SMTP_HOST or "localhost",
        "port": int(os.environ.get("EMAIL_PORT", 25)),
        "username": os.environ.get("EMAIL_HOST_USER", ""),
        "password": os.environ.get("EMAIL_HOST_PASSWORD", ""),
        "use_tls": env_bool("EMAIL_USE_TLS", False),
    },
}
_MAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "")
MAILERS = {"default": {"BACKEND": _MAIL_BACKEND} if _MAIL_BACKEND else _SMTP}
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "workbench@localhost")
NOTIFY_BY_EMAIL = env_bool("NOTIFY_BY_EMAIL", bool(_SMTP_HOST))
SITE_URL = os.environ.get("SITE_URL", "").rstrip("/")

# Files up to this size import inside the request; larger ones become a background job.
# The cache holds the reward API's per-token request counts and the login failure counts.
# Each process has its own by default; with several web processes (gunicorn) set
# CACHE_URL=redis://... so the limits are counted once across them (the redis client comes with
# celery[redis]); gunicorn.conf.py refuses to start more than one process without it.
CACHE_URL = os.environ.get("CACHE_URL", "")
if CACHE_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CACHE_URL,
        }
    }
else:
    # Room for every count a process keeps: at Django's default of 300 entries, a flood of
    # failed logins under new user names would evict the lockouts.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "OPTIONS": {"MAX_ENTRIES": 100_000},
        }
    }
# A reward API request body larger than this is refused with 413 before it is parsed.
REWARD_API_MAX_BYTES = int(os.environ.get("REWARD_API_MAX_BYTES", 2 * 1024 * 1024))
# Capture (graders/capture.py): groups kept per task (reservoir sampling beyond that), and the
# largest body the bulk capture endpoint takes (413 beyond it).
CAPTURE_GROUPS_PER_TASK = int(os.environ.get("CAPTURE_GROUPS_PER_TASK", 16))
CAPTURE_MAX_BYTES = int(os.environ.get("CAPTURE_MAX_BYTES", 16 * 1024 * 1024))
# Drawn groups waiting for the web process's capture thread, which sends them to a worker to
# store; past it they are dropped. 0 stores them in the request's thread once its answer is
# sent.
CAPTURE_QUEUE_SIZE = int(os.environ.get("CAPTURE_QUEUE_SIZE", 256))
IMPORT_INLINE_MAX_BYTES = int(os.environ.get("IMPORT_INLINE_MAX_BYTES", 2 * 1024 * 1024))
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("DATA_UPLOAD_MAX_MEMORY_SIZE", 2 * 1024 * 1024))
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
IMPORT_MAX_FILE_BYTES = int(os.environ.get("IMPORT_MAX_FILE_BYTES", 2 * 1024**3))

SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", 31536000))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Session only: Basic auth would take passwords on every request, past the login
        # throttle and without CSRF. The reward API authenticates its tokens itself.
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON bodies nested deeper than labeling.json_input.MAX_JSON_DEPTH are a 400, not a 500.
    "DEFAULT_PARSER_CLASSES": [
        "labeling.api_parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}

# Celery. The default broker keeps messages in files under var/, so the embedded setup needs no
# server; CELERY_BROKER_URL=redis://... or amqp://... selects a real broker.
BROKER_DIR = Path(os.environ.get("WORKBENCH_BROKER_DIR", VAR_DIR / "broker"))
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
    # The file-system transport does not create its folders, and both processes need them.
    for folder in ("queue", "control"):
        (BROKER_DIR / folder).mkdir(parents=True, exist_ok=True)
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # Redis re-delivers an unacknowledged task after this long; it must outlast the longest
    # task, or a healthy long run would be delivered a second time while still going.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": int(os.environ.get("CELERY_TASK_TIME_LIMIT", 6 * 3600)) + 3600
    }
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "workbench")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# A worker running a long job (a search) beats every quarter of this; a job whose beat is
# older is taken over by the next worker that starts or receives it again.
JOB_LEASE_SECONDS = float(os.environ.get("WORKBENCH_JOB_LEASE_SECONDS", 60))
CELERY_TASK_TIME_LIMIT = int(os.environ.get("CELERY_TASK_TIME_LIMIT", 6 * 3600))
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
