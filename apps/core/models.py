from django.contrib.auth.models import AbstractUser


class User(AbstractUser):
    """A person who signs in to the console. Machines use API keys, not users."""

    class Meta:
        db_table = "core_user"
