import contextlib
import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.tenants.models import Membership
from apps.tenants.permissions import Role
from apps.tenants.services import tenant_create

CREDENTIALS_FILE = "first-start-credentials.txt"


def _write_owner_only(path, text: str) -> None:
    """Creates `path` with mode 0600 from the start (no moment where it is readable by others), replacing
    whatever was there; a link at that name is removed, never followed."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


class Command(BaseCommand):
    help = "First start: creates an admin user and the demo tenant if there are none; prints the login."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--tenant", default="demo")

    def handle(self, *args, username, tenant, **options):
        from django.conf import settings

        credentials = settings.VAR_DIR / CREDENTIALS_FILE
        User = get_user_model()
        with transaction.atomic():
            demo, _ = tenant_create(slug=tenant, name="Demo tenant", actor=Actor.system("bootstrap"))
            if User.objects.filter(username=username).exists():
                password = None
            else:
                password = secrets.token_urlsafe(12)
                user = User.objects.create_superuser(username=username, email="", password=password)
                membership = Membership.objects.create(tenant=demo, user=user, role=Role.ADMIN)
                audit_record(
                    tenant=demo,
                    actor=Actor.system("bootstrap"),
                    verb="member.add",
                    target=membership,
                    data={"user": username, "role": Role.ADMIN},
                )
        if password:
            _write_owner_only(credentials, f"username: {username}\npassword: {password}\n")
        if credentials.exists():
            self.stdout.write(credentials.read_text().strip())
        else:
            self.stdout.write(
                f"username: {username} (password set earlier; reset with manage.py changepassword)"
            )
