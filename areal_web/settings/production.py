"""Production: refuses to start unless it is configured safely.

Required: DJANGO_SECRET_KEY, AREAL_SECRETS_KEY and AREAL_INFERENCE_ADMIN_SECRET (three different values),
DJANGO_ALLOWED_HOSTS, DEBUG off. Passes `manage.py check --deploy`.
"""

from areal_web.env import ConfigurationError, env_bool, env_int, env_list, env_str
from areal_web.settings.base import *  # noqa: F403

SECRET_KEY = env_str("DJANGO_SECRET_KEY")
# Independent secrets: none is derived from another, and none may be another's value.
AREAL_SECRETS_KEY = env_str("AREAL_SECRETS_KEY")
AREAL_INFERENCE_ADMIN_SECRET = env_str("AREAL_INFERENCE_ADMIN_SECRET")
if len({SECRET_KEY, AREAL_SECRETS_KEY, AREAL_INFERENCE_ADMIN_SECRET}) < 3:
    raise ConfigurationError(
        "DJANGO_SECRET_KEY, AREAL_SECRETS_KEY and AREAL_INFERENCE_ADMIN_SECRET must be three different secrets"
    )
if env_bool("DJANGO_DEBUG", False):
    raise ConfigurationError("DJANGO_DEBUG must be off in production settings")
DEBUG = False
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS")
if not ALLOWED_HOSTS:
    raise ConfigurationError("DJANGO_ALLOWED_HOSTS is empty; list the host names this site answers to")

# Backends may be any globally routable address; private, loopback and link-local ones only when listed.
AREAL_BACKEND_ALLOWED_HOSTS = env_list("AREAL_BACKEND_ALLOWED_HOSTS", ["public"])

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# /metrics needs AREAL_METRICS_TOKEN (a reverse proxy on this host makes every client look like loopback);
# the API schema and docs need a signed-in person or an API key.
AREAL_METRICS_ALLOW_LOOPBACK = env_bool("AREAL_METRICS_ALLOW_LOOPBACK", False)
AREAL_API_DOCS_PUBLIC = env_bool("AREAL_API_DOCS_PUBLIC", False)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
