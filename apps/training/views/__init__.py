"""Console pages of apps.training: `jobs` (training jobs and online runs) and `versions` (the model
registry's pages: versions, registration, direct publication, lineage, aliases, chat templates)."""

from apps.core.errors import DomainError


def form_refusal_show(form, error: DomainError) -> None:
    """A service's refusal shown on the form: beside the fields it names, else above the form."""
    named = [field for field in (error.fields or {}) if field in form.fields]
    for field in named:
        for problem in error.fields[field]:
            form.add_error(field, problem)
    form.add_error(None, error.message)
