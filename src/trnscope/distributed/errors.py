"""Errors a multi-rank run raises instead of hanging or failing deep inside gloo."""


class DistributedError(RuntimeError):
    pass


class CollectiveMismatchError(DistributedError):
    """Two ranks called a collective with different operations, shapes or dtypes."""


class RankFailedError(DistributedError):
    """A rank did not reach a collective: its process died or is stuck."""
