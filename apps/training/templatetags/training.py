"""Template filters of the training app's words (`{% load training %}`): `job|training_job_title` and
`run|online_run_title` name a training job or an online run by what it does (apps/training/job_words.py)."""

from django import template

from apps.training import job_words

register = template.Library()


@register.filter
def training_job_title(job) -> str:
    """ "Training of policy-small from v2"."""
    return job_words.training_job_title(job)


@register.filter
def online_run_title(run) -> str:
    """ "Online run of policy-small from v2"."""
    return job_words.online_run_title(run)
