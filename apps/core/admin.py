from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from apps.core.login_throttle import ThrottledAdminAuthenticationForm, login_throttled
from apps.core.models import User

admin.site.register(User, UserAdmin)

# The admin's sign-in goes through the same throttle as the console's (apps/core/login_throttle.py): the
# backend refuses, this form says why, and a refused attempt answers 429 as the console's does.
admin.site.login_form = ThrottledAdminAuthenticationForm
_admin_login = admin.site.login


def _throttled_admin_login(request, extra_context=None):
    response = _admin_login(request, extra_context)
    if login_throttled(request):
        response.status_code = 429
    return response


admin.site.login = _throttled_admin_login
