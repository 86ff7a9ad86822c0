import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.tenants.models import Membership
from apps.tenants.permissions import Role
from apps.tenants.services import tenant_create

CREDENTIALS_FILE = "first-start-credentials.txt"


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
                audit_record(tenant=demo, actor=Actor.system("bootstrap"), verb="member.add", target=membership,
                             data={"user": username, "role": Role.ADMIN})
        if password:
            credentials.write_text(f"username: {username}\npassword: {password}\n")
            credentials.chmod(0o600)
        if credentials.exists():
            self.stdout.write(credentials.read_text().strip())
        else:
            self.stdout.write(f"username: {username} (password set earlier; reset with manage.py changepassword)")
