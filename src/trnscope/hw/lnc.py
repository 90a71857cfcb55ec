"""Logical NeuronCores (LNC): ``NEURON_LOGICAL_NC_CONFIG`` groups physical NeuronCores into the cores a
process sees (S23). At LNC=2 (Trn2's default) one logical core is two physical NeuronCore-v3 sharing
one HBM bank: the chip shows 4 cores, each with the pair's 24 GiB and HBM bandwidth, and a kernel's
work is spread over both physical cores, each with its own engines, SBUF/PSUM and 16 DMA engines.
Trn1 accepts only LNC=1 (NCC_EARG001, S45).

:func:`logical_spec` is the one place that derives a logical core's spec from a physical one.
"""

from __future__ import annotations

import os

from .spec import HardwareSpec

LNC_ENV_VAR = "NEURON_LOGICAL_NC_CONFIG"


class LncConfigError(ValueError):
    """An LNC degree the target does not support (or not a number)."""


def physical_spec(spec: HardwareSpec) -> HardwareSpec:
    """The spec of one physical core of ``spec``'s target (``spec`` itself at LNC=1)."""
    n = spec.lnc
    if n == 1:
        return spec
    return spec.replace(lnc=1, cores_per_chip=spec.cores_per_chip * n, hbm_bytes_per_core=spec.hbm_bytes_per_core // n,
                        hbm_bytes_per_s_per_core=spec.hbm_bytes_per_s_per_core / n)


def parse_lnc(value: str | int, spec: HardwareSpec, origin: str = LNC_ENV_VAR) -> int:
    """``value`` as an LNC degree ``spec``'s target accepts, else :class:`LncConfigError` naming ``origin``."""
    allowed = ", ".join(map(str, spec.lnc_supported))
    n: int | None
    try:
        n = int(str(value).strip())
    except ValueError:
        n = None
    if n not in spec.lnc_supported:
        hint = ""
        if origin == LNC_ENV_VAR:
            hint = (f" ({spec.name} has no logical-core pairing: unset {origin} or set it to 1)"
                    if spec.lnc_supported == (1,) else f" (unset it for the default, {spec.lnc_default})")
        raise LncConfigError(
            f"{origin}={value!r} is not supported on {spec.name} ({spec.neuroncore}): allowed values are {allowed}{hint}")
    assert n is not None
    return n


def lnc_from_env(spec: HardwareSpec) -> int:
    """The LNC degree in force for ``spec``'s target: ``$NEURON_LOGICAL_NC_CONFIG``, else the target's default."""
    value = os.environ.get(LNC_ENV_VAR, "").strip()
    return parse_lnc(value, spec) if value else spec.lnc_default


def logical_spec(target: str | HardwareSpec, lnc: int | str | None = None) -> HardwareSpec:
    """The spec of one logical NeuronCore of ``target`` (a name such as ``"trn2"`` or a spec) at LNC
    degree ``lnc`` (None: ``$NEURON_LOGICAL_NC_CONFIG``, else the target's default: 2 on trn2, 1 on trn1).

    Device count, HBM capacity and bandwidth, DMA engines and TensorE peak follow the logical core;
    per-physical-core resources (SBUF, PSUM, engines' clocks) stay as they are."""
    from .instance import resolve

    phys = physical_spec(resolve(target))
    n = lnc_from_env(phys) if lnc is None else parse_lnc(lnc, phys, origin="lnc")
    if n == 1:
        return phys
    if phys.physical_cores_per_chip % n:
        raise LncConfigError(f"LNC={n} does not divide {phys.name}'s {phys.physical_cores_per_chip} physical cores")
    return phys.replace(lnc=n, cores_per_chip=phys.cores_per_chip // n, hbm_bytes_per_core=phys.hbm_bytes_per_core * n,
                        hbm_bytes_per_s_per_core=phys.hbm_bytes_per_s_per_core * n)
