"""Settings shared by every mode.

With no environment set, everything is embedded: SQLite under var/, a Celery broker and result store
on the filesystem under var/, an in-memory channel layer relayed between local processes and a file cache. DATABASE_URL (PostgreSQL)
and REDIS_URL switch to the real services.
"""

import os
from pathlib import Path

from areal_web.env import (
    env_bool,
    env_choice,
    env_int,
    env_int_map,
    env_list,
    env_str,
    generated_secret,
    parse_database_url,
)
from areal_web.queues import TASK_QUEUES, Queue

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("AREAL_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# Django's signing key (sessions, CSRF, password reset). Unset: generated once into the var folder (the embedded
# default); production requires it. It is one of three independent secrets: the backend credentials' key
# (AREAL_SECRETS_KEY) and the inference admin secret (AREAL_INFERENCE_ADMIN_SECRET) derive nothing from it.
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "") or generated_secret(VAR_DIR / "django-secret-key")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "apps.core",
    "apps.tenants",
    "apps.audit",
    "apps.metrics",
    "apps.inference",
    "apps.trajectories",
    "apps.rewards",
    "apps.qualification",
    "apps.annotation",
    "apps.gateway",
    "apps.training",
    "apps.evaluation",
    "apps.releases",
    "apps.evolution",
    "apps.console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "areal_web.urls"
ASGI_APPLICATION = "areal_web.asgi.application"
AUTH_USER_MODEL = "core.User"
LOGIN_URL = "console:login"
LOGIN_REDIRECT_URL = "console:home"
LOGOUT_REDIRECT_URL = "console:login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.console.context.console",
            ],
        },
    },
]

# Database: PostgreSQL from DATABASE_URL, otherwise SQLite under var/ (WAL, so worker processes can
# write while the web process reads; IMMEDIATE transactions so writers queue instead of deadlocking).
DATABASE_URL = env_str("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {"default": parse_database_url(DATABASE_URL)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "areal.sqlite3",
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis: Celery broker and results, channel layer, cache. Without it: files under var/, in-memory layer.
REDIS_URL = env_str("REDIS_URL", "")
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_RESULT_BACKEND = REDIS_URL
    # A prefix on every broker key (queues included): installations, or test sessions, sharing one Redis keep
    # their queues apart.
    if env_str("AREAL_BROKER_PREFIX", ""):
        CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": env_str("AREAL_BROKER_PREFIX", "")}
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": env_str("AREAL_CHANNEL_PREFIX", "areal")},
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env_str("AREAL_CACHE_PREFIX", ""),
        }
    }
else:
    _broker_dir = VAR_DIR / "broker"
    for _folder in ("queue", "processed", "control"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
    (VAR_DIR / "celery-results").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "areal_web.broker:AtomicFilesystemTransport"  # atomic message files (see there)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        "control_folder": str(_broker_dir / "control"),
    }
    CELERY_RESULT_BACKEND = f"file://{VAR_DIR / 'celery-results'}"
    # In-memory, with group messages relayed between this machine's processes (apps/metrics/layers.py).
    CHANNEL_LAYERS = {"default": {"BACKEND": "apps.metrics.layers.ProcessRelayChannelLayer"}}
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    }

CELERY_TASK_DEFAULT_QUEUE = Queue.DEFAULT.value
CELERY_TASK_ROUTES = {name: {"queue": queue.value} for name, queue in TASK_QUEUES.items()}
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_TRACK_STARTED = True
CELERY_RESULT_EXPIRES = 3600
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.tenants.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "apps.core.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "apps.core.pagination.PagePagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "apps.core.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "apps.core.schema.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "areal-web API",
    "DESCRIPTION": "Tenants, members, API keys, policy and the audit log of areal-web.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # One schema name per choice set, whatever the field is called.
    "ENUM_NAME_OVERRIDES": {
        "RewardKindEnum": "apps.rewards.models.RewardKind",
        "RewardSourceEnum": "apps.rewards.models.RewardSource",
        "EvaluatorKindEnum": "apps.rewards.models.EvaluatorKind",
        "BackendKindEnum": "apps.inference.models.BackendKind",
    },
}

# Login throttling (apps/core/login_throttle.py, for the console and the Django admin): after this many
# attempts for one username from one client address (or this many failures from one address, whatever the
# usernames) within the window, further attempts are refused until the window passes.
AUTHENTICATION_BACKENDS = ["apps.core.login_throttle.ThrottledModelBackend"]
AREAL_LOGIN_MAX_FAILURES = env_int("AREAL_LOGIN_MAX_FAILURES", 5)
AREAL_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("AREAL_LOGIN_MAX_FAILURES_PER_ADDRESS", 50)
AREAL_LOGIN_WINDOW_SECONDS = env_int("AREAL_LOGIN_WINDOW_SECONDS", 900)
# The gateway journals each step before answering; a background flusher writes journalled steps to
# the database in batches every this many milliseconds (group commit).
AREAL_JOURNAL_FLUSH_MS = env_int("AREAL_JOURNAL_FLUSH_MS", 50)
# Where the flushed batches are stored: "process", by a recorder process beside each web process, which reads
# them back from the journal (apps/gateway/recorder.py), or "thread", by the web process's own flusher thread.
AREAL_GATEWAY_RECORDER = env_choice("AREAL_GATEWAY_RECORDER", ("process", "thread"), "process")
# Steps the database refuses (and journal lines recovery cannot read) are set aside, metadata only, in the
# journal directory's rejected.jsonl, rotated to rejected.jsonl.1 past this size.
AREAL_JOURNAL_REJECTED_MAX_BYTES = env_int("AREAL_JOURNAL_REJECTED_MAX_BYTES", 64 * 1024 * 1024)
AREAL_GATEWAY_MAX_BODY_BYTES = env_int("AREAL_GATEWAY_MAX_BODY_BYTES", 2 * 1024 * 1024)
# Completion tokens reserved (budget, tpm) and forwarded as the cap for a request that sets no max_tokens
# (no cap is forwarded where the backend's context length is no larger; apps/gateway/caps.py).
AREAL_GATEWAY_DEFAULT_MAX_TOKENS = env_int("AREAL_GATEWAY_DEFAULT_MAX_TOKENS", 1024)
# A budget reservation older than this is released: no call runs that long, so its process died before settling.
AREAL_GATEWAY_RESERVATION_SECONDS = env_int("AREAL_GATEWAY_RESERVATION_SECONDS", 3600)
# Request bodies on Django's paths (REST API, console, admin): a larger body gets 413 before Django reads it
# (areal_web/middleware.py). Path prefixes may have caps of their own (the longest matching prefix wins).
AREAL_MAX_BODY_BYTES = env_int("AREAL_MAX_BODY_BYTES", 10 * 1024 * 1024)
AREAL_MAX_BODY_BYTES_BY_PATH = env_int_map(
    "AREAL_MAX_BODY_BYTES_BY_PATH", {"/api/v1/trajectories/import/": 64 * 1024 * 1024}
)
# How long a verified API key stays in the cache before the database is asked again.
AREAL_API_KEY_CACHE_SECONDS = env_int("AREAL_API_KEY_CACHE_SECONDS", 300)
# /rl/start_session calls per minute and tenant (0: no limit beyond the tenant's requests per minute).
AREAL_GATEWAY_SESSION_STARTS_PER_MINUTE = env_int("AREAL_GATEWAY_SESSION_STARTS_PER_MINUTE", 1200)
# How long the gateway's shared session state lives after a session's last step (apps/gateway/sessions.py):
# its cursor (parent links, retry detection) and its conversations (message-prefix continuation).
AREAL_GATEWAY_CONVERSATION_TTL_SECONDS = env_int("AREAL_GATEWAY_CONVERSATION_TTL_SECONDS", 3600)
# /rl/set_reward and /rl/end_session's final_reward without an interaction id reward the session's last
# completion, which another web process may have served and not yet stored: they wait this long for it to
# reach the database (its process flushes every AREAL_JOURNAL_FLUSH_MS), then answer 503 with Retry-After.
AREAL_GATEWAY_REWARD_STEP_WAIT_MS = env_int("AREAL_GATEWAY_REWARD_STEP_WAIT_MS", 5000)

# The gateway's PII scan (workers/pii, called by apps/gateway/pii_scans.py): at most this many characters
# per scan (a request's messages, a step's observation, its action) and this long in tenant patterns; what
# cannot be scanned is refused under PII mode `block` and stored as [REDACTED:unscanned] under `redact`.
AREAL_PII_MAX_SCAN_CHARS = env_int("AREAL_PII_MAX_SCAN_CHARS", 1024 * 1024)
AREAL_PII_PATTERN_TIMEOUT_MS = env_int("AREAL_PII_PATTERN_TIMEOUT_MS", 250)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("AREAL_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

CELERY_BEAT_SCHEDULE = {
    "audit-verify-chains": {"task": "audit.verify_chains", "schedule": 24 * 3600.0},
    "inference-check-backends": {"task": "inference.check_backends", "schedule": 15.0},
    "releases-analyze": {
        "task": "releases.analyze_all",
        "schedule": float(env_int("AREAL_RELEASE_ANALYSIS_SECONDS", 60)),
    },
    # Annotation queues take in newly matching trajectories this often.
    "annotation-fill": {
        "task": "annotation.fill_queues",
        "schedule": float(env_int("AREAL_ANNOTATION_FILL_SECONDS", 30)),
    },
    # Retention: trajectories past retention_until are deleted (apps/trajectories/retention.py), in batches of
    # AREAL_RETENTION_BATCH_SIZE trajectories, at most AREAL_RETENTION_MAX_BATCHES_PER_RUN per tenant per run.
    "trajectories-purge-expired": {
        "task": "trajectories.purge_expired",
        "schedule": float(env_int("AREAL_RETENTION_PURGE_SECONDS", 3600)),
    },
}
# Idle sessions: open trajectories with no step for their tenant's policy `session_idle_seconds` are closed
# (apps/trajectories/lifecycle.py) this often, in batches of AREAL_SESSION_IDLE_BATCH_SIZE, at most
# AREAL_SESSION_IDLE_MAX_BATCHES per tenant per run.
CELERY_BEAT_SCHEDULE["trajectories-close-idle"] = {
    "task": "trajectories.close_idle",
    "schedule": float(env_int("AREAL_SESSION_IDLE_CHECK_SECONDS", 30)),
}
AREAL_SESSION_IDLE_BATCH_SIZE = env_int("AREAL_SESSION_IDLE_BATCH_SIZE", 200)
AREAL_SESSION_IDLE_MAX_BATCHES = env_int("AREAL_SESSION_IDLE_MAX_BATCHES", 10)
AREAL_RETENTION_BATCH_SIZE = env_int("AREAL_RETENTION_BATCH_SIZE", 200)
AREAL_RETENTION_MAX_BATCHES_PER_RUN = env_int("AREAL_RETENTION_MAX_BATCHES_PER_RUN", 50)

# Evaluation and releases. Eval workers call the gateway as agents do, at this URL (the web process; in a
# cluster, its internal service address). No key is configured: a worker mints a per-session key for each
# eval case in the shared cache (see apps/loop/eval_runs.py).
AREAL_GATEWAY_URL = env_str("AREAL_GATEWAY_URL", "http://127.0.0.1:8000")
# Program evaluators and program-checked eval cases run only executables from this directory (unset: none).
AREAL_EVALUATOR_PROGRAMS_DIR = env_str("AREAL_EVALUATOR_PROGRAMS_DIR", "")
AREAL_EVAL_REQUEST_TIMEOUT_SECONDS = env_int("AREAL_EVAL_REQUEST_TIMEOUT_SECONDS", 120)
# torch's intra-op threads for an environment gate measured in the eval worker (0: torch's own choice)
AREAL_GATE_THREADS = env_int("AREAL_GATE_THREADS", 0)
# The queue eval runs are sent to, and how long a running run may go without a heartbeat (one per case, so
# longer than a case's request timeout) before beat requeues it to another worker (a killed worker).
AREAL_EVAL_QUEUE = env_str("AREAL_EVAL_QUEUE", Queue.EVAL.value)
AREAL_EVAL_STALE_SECONDS = env_int("AREAL_EVAL_STALE_SECONDS", 300)
CELERY_BEAT_SCHEDULE["evaluation-requeue-stale"] = {"task": "evaluation.requeue_stale", "schedule": 60.0}
# How long a gateway process keeps a tenant's routing (canary split) before reading it again: a stage change
# or rollback reaches new sessions within this many seconds.
AREAL_ROUTING_CACHE_SECONDS = env_int("AREAL_ROUTING_CACHE_SECONDS", 2)
# Plotly's browser bundle, shipped inside the plotly package, served as static/vendor/plotly/plotly.min.js.
STATICFILES_DIRS += [("vendor/plotly", str(Path(__import__("plotly").__file__).parent / "package_data"))]

# Training jobs (apps.training, apps/loop/training_runs.py): the queue they are sent to, where runs keep their
# checkpoints and where trained versions are exported, how long a silent running job waits before beat
# requeues it (a killed worker), torch threads, scheduling niceness (0: unchanged; 10: training takes the CPU that
# serving and evaluation leave on a shared host) and device of a training worker ("" = cuda if present).
AREAL_TRAINING_QUEUE = env_str("AREAL_TRAINING_QUEUE", Queue.TRAIN.value)
AREAL_TRAINING_DIR = Path(env_str("AREAL_TRAINING_DIR", str(VAR_DIR / "training")))
AREAL_MODELS_DIR = Path(env_str("AREAL_MODELS_DIR", str(VAR_DIR / "models")))
AREAL_TRAINING_STALE_SECONDS = env_int("AREAL_TRAINING_STALE_SECONDS", 300)
AREAL_TRAINING_THREADS = env_int("AREAL_TRAINING_THREADS", 2)
AREAL_TRAINING_NICENESS = env_int("AREAL_TRAINING_NICENESS", 0)
AREAL_TRAINING_DEVICE = env_str("AREAL_TRAINING_DEVICE", "") or None
# Generated tokens whose policy version is unknown (-1: no backend version could be derived) cannot be aged by
# the staleness bound: "keep" trains them (counted and logged; the log-linear proximal treats them as on-policy),
# "drop" leaves out every sample holding one (counted) (workers/rl/samples.py).
AREAL_TRAINING_UNKNOWN_VERSIONS = env_choice("AREAL_TRAINING_UNKNOWN_VERSIONS", ("keep", "drop"), "keep")
# Model import (manage.py importmodel, workers/models): the largest model, in bytes of float32 weights, a
# conversion may load (a GGUF is de-quantized to float32 in memory; the process peaks near twice this).
AREAL_MODEL_IMPORT_MAX_BYTES = env_int("AREAL_MODEL_IMPORT_MAX_BYTES", 8 << 30)
# Model registration from a directory (API, console, manage.py registermodel): a tenant names a directory inside
# its own inbox, AREAL_MODEL_INBOX_DIR/<tenant slug>/, and only there (the installation's file system is not
# tenant input); the registered copy lives under AREAL_MODELS_DIR/<tenant slug>/<model>/.
AREAL_MODEL_INBOX_DIR = Path(env_str("AREAL_MODEL_INBOX_DIR", str(VAR_DIR / "model-inbox")))
CELERY_BEAT_SCHEDULE["training-requeue-stale"] = {"task": "training.requeue_stale", "schedule": 60.0}

# Live overview (apps.loop.outcomes): a worker publishes each tenant's reward/success point this often.
# /metrics (Prometheus): with AREAL_METRICS_TOKEN set, scrapers send "Authorization: Bearer <token>";
# without it, only loopback clients are answered.
CELERY_BEAT_SCHEDULE["metrics-overview-tick"] = {
    "task": "metrics.overview_tick",
    "schedule": float(env_int("AREAL_OVERVIEW_TICK_SECONDS", 10)),
}
AREAL_METRICS_TOKEN = env_str("AREAL_METRICS_TOKEN", "")

# The evolution control plane (apps.evolution): beat ticks every enabled policy this often (0: no beat tick;
# whoever runs the stack ticks itself, as `make demo` does in its own process).
AREAL_EVOLUTION_TICK_SECONDS = env_int("AREAL_EVOLUTION_TICK_SECONDS", 10)
if AREAL_EVOLUTION_TICK_SECONDS > 0:
    CELERY_BEAT_SCHEDULE["evolution-tick"] = {
        "task": "evolution.tick",
        "schedule": float(AREAL_EVOLUTION_TICK_SECONDS),
    }
# Live WebSocket streams (apps/metrics/consumers.py) read the member's membership and role again this often:
# a removed member is disconnected, a demoted one leaves the streams the new role may not view.
AREAL_LIVE_RECHECK_SECONDS = env_int("AREAL_LIVE_RECHECK_SECONDS", 30)
# Without a token, loopback clients may scrape (off in production: behind a proxy every client is loopback).
AREAL_METRICS_ALLOW_LOOPBACK = env_bool("AREAL_METRICS_ALLOW_LOOPBACK", True)
# /api/schema/ and /api/docs/ open to anyone (off in production: signed-in people and API keys only).
AREAL_API_DOCS_PUBLIC = env_bool("AREAL_API_DOCS_PUBLIC", True)
# Prometheus counters are shared by this machine's processes (prometheus_client's multiprocess mode): each
# process writes memory-mapped files here, a scrape sums them. prometheus_client reads the variable when it
# is imported, which is after the settings. `manage.py up` empties the folder at start; in production give
# each start of the web service an empty folder (a tmpfs, or remove its files before starting).
AREAL_PROMETHEUS_DIR = Path(env_str("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "prometheus")))
AREAL_PROMETHEUS_DIR.mkdir(parents=True, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(AREAL_PROMETHEUS_DIR)

# Inference backends (apps/inference/egress.py). The addresses the platform may connect to for a tenant's backend
# URL: entries HOST:PORT (a name, an address or a network; PORT a number or *), and `public` for any globally
# routable address. Default: this machine's embedded inference ports (the two serving slots of `up` and the demo)
# and public addresses, so no tenant can aim the platform at Redis, PostgreSQL or anything else on loopback or a
# private network.
AREAL_INFERENCE_PORT = env_int("AREAL_INFERENCE_PORT", 8100)
AREAL_BACKEND_ALLOWED_HOSTS = env_list(
    "AREAL_BACKEND_ALLOWED_HOSTS",
    [
        f"{host}:{port}"
        for port in (AREAL_INFERENCE_PORT, AREAL_INFERENCE_PORT + 1)
        for host in ("127.0.0.1", "[::1]")
    ]
    + ["public"],
)
# Which of those addresses (operator-listed ones; `public` needs none) each tenant may register a backend at, besides
# the grants the operator writes with `manage.py backendgrant` (apps/inference/grants.py): entries TENANT=HOST:PORT,
# TENANT a slug or * (every tenant). Default: none.
AREAL_BACKEND_GRANTS = env_list("AREAL_BACKEND_GRANTS", [])
# Largest backend response body the gateway reads (a larger one answers 502 backend_response_too_large).
AREAL_GATEWAY_MAX_RESPONSE_BYTES = env_int("AREAL_GATEWAY_MAX_RESPONSE_BYTES", 32 * 1024 * 1024)
# How often a gateway process reads again the served versions and weight swaps of the backends it forwards to
# (apps/inference/served.py), from which it stamps per-token policy versions on answers that carry none (vLLM).
AREAL_GATEWAY_SWAP_REFRESH_MS = env_int("AREAL_GATEWAY_SWAP_REFRESH_MS", 250)
# vLLM's pause mode during a publication: "wait" (in-flight requests finish on the old weights first) or "keep"
# (they freeze and continue on the new weights; a stream then spans two versions, split by the gateway).
AREAL_VLLM_PAUSE_MODE = env_choice("AREAL_VLLM_PAUSE_MODE", ("wait", "keep"), "wait")
# The embedded inference servers' admin API (weight loads, pause) needs a bearer token, each server its own:
# HMAC-SHA256 of its HOST:PORT under this secret (apps/inference/admin_tokens.py). `up` and the demo start each
# server with its token; publication sends a backend only its server's token, and only to operator-listed
# addresses. Unset: generated once into the var folder; production requires it. Derived from no other secret.
AREAL_INFERENCE_ADMIN_SECRET = env_str("AREAL_INFERENCE_ADMIN_SECRET", "") or generated_secret(
    VAR_DIR / "inference-admin-secret"
)
# Tenants' backend credentials (API keys of hosted providers) are stored encrypted (apps/inference/credentials.py:
# Fernet, a key derived by SHA-256 from this secret). Any long random string; unset: generated once into the var
# folder; production requires it. Derived from no other secret. To change it, move the old secret to
# AREAL_SECRETS_PREVIOUS_KEYS (comma-separated, read only to decrypt) and set credentials again.
AREAL_SECRETS_KEY = env_str("AREAL_SECRETS_KEY", "") or generated_secret(VAR_DIR / "secrets-key")
AREAL_SECRETS_PREVIOUS_KEYS = env_list("AREAL_SECRETS_PREVIOUS_KEYS", [])
