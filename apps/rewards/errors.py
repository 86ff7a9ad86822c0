from apps.core.errors import DomainError


class RewardRejected(DomainError):
    """A reward that does not fit its spec (out of range, unknown category, unknown spec): 422."""

    status = 422
    code = "reward_out_of_spec"
