"""Training jobs and online runs in words, as the console names them: by what they do ("Training of
policy-small from v2", "Online run of policy-small from v2"), never by their database id. Pure functions of
the row (its base version read through the foreign key)."""


def training_job_title(job) -> str:
    """A training job named by its model and base version: "Training of policy-small from v2"."""
    base = job.base_version
    return f"Training of {base.name} from v{base.number}"


def online_run_title(run) -> str:
    """An online run named by its model and the version it learns from: "Online run of policy-small from v2"."""
    return f"Online run of {run.model_name} from v{run.base_version.number}"
