"""The kernel library: importing it registers every lowering."""

from . import elementwise, norm, reduce, softmax  # noqa: F401
