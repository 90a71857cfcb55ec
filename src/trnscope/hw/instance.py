"""Which target this process emulates: env ``TRNSCOPE_INSTANCE`` (trn1 | trn2) or :func:`set_instance`,
as a logical NeuronCore at the LNC degree of ``$NEURON_LOGICAL_NC_CONFIG`` (trn2: 2 by default)."""

from __future__ import annotations

import os

from .spec import HardwareSpec
from .targets import DEFAULT_TARGET, TARGETS

ENV_VAR = "TRNSCOPE_INSTANCE"
_current: HardwareSpec | None = None


class UnknownInstanceError(ValueError):
    pass


def resolve(name: str | HardwareSpec) -> HardwareSpec:
    """The spec for a target name; accepts instance names such as ``trn2.48xlarge`` too."""
    if isinstance(name, HardwareSpec):
        return name
    key = name.strip().lower().split(".")[0]
    if key not in TARGETS:
        raise UnknownInstanceError(
            f"unknown Trainium instance {name!r}: choose one of {', '.join(sorted(TARGETS))} "
            f"(set {ENV_VAR} or call trnscope.hw.set_instance)"
        )
    return TARGETS[key]


def get_spec() -> HardwareSpec:
    """The spec in force: the one set by :func:`set_instance`, else ``$TRNSCOPE_INSTANCE`` (else trn2)
    as a logical core at ``$NEURON_LOGICAL_NC_CONFIG`` (else the target's default LNC)."""
    global _current
    if _current is None:
        from .lnc import logical_spec

        _current = logical_spec(os.environ.get(ENV_VAR) or DEFAULT_TARGET)
    return _current


def set_instance(name: str | HardwareSpec, lnc: int | None = None) -> HardwareSpec:
    """Emulate another target from now on. A name gives its logical core at LNC ``lnc`` (None:
    ``$NEURON_LOGICAL_NC_CONFIG``, else the target's default); a spec is taken as it is. Returns the spec."""
    if isinstance(name, HardwareSpec) and lnc is None:
        spec = name
    else:
        from .lnc import logical_spec

        spec = logical_spec(name, lnc)
    reset(spec)
    return spec


def reset(spec: HardwareSpec | None = None) -> HardwareSpec | None:
    """Make ``spec`` the one in force (None: the environment's default again, made at the next
    :func:`get_spec`); tells every :func:`on_change` listener. Returns ``spec``."""
    global _current
    _current = spec
    for listener in _listeners:
        listener()
    return spec


_listeners: list = []


def on_change(listener) -> None:
    """Call ``listener()`` whenever the spec in force is replaced (the runtime's C++ queues are per spec)."""
    if listener not in _listeners:
        _listeners.append(listener)
