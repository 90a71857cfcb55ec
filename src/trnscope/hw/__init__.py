"""Hardware specs as data: NeuronCore-v2 (trn1) and NeuronCore-v3 (trn2), each constant sourced."""

from .instance import ENV_VAR, UnknownInstanceError, get_spec, resolve, set_instance
from .lnc import LNC_ENV_VAR, LncConfigError, lnc_from_env, logical_spec, physical_spec
from .spec import GiB, KiB, MiB, HardwareSpec
from .targets import DEFAULT_TARGET, TARGETS, TRN1, TRN2

__all__ = [
    "ENV_VAR", "DEFAULT_TARGET", "GiB", "KiB", "MiB", "HardwareSpec", "TARGETS", "TRN1", "TRN2",
    "UnknownInstanceError", "get_spec", "resolve", "set_instance",
    "LNC_ENV_VAR", "LncConfigError", "lnc_from_env", "logical_spec", "physical_spec",
]
