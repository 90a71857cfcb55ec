"""The kernel library: importing it registers every lowering."""

from . import elementwise, norm, reduce  # noqa: F401
