"""``ProfileMode`` and ``NeuronConfig``: what to capture, as TorchNeuron's profiling API names it.

``NeuronConfig`` is passed to ``torch.profiler.profile(experimental_config=...)``. Like TorchNeuron's,
it *is* a ``torch._C._profiler._ExperimentalConfig`` (a subclass), so torch carries it into the
profiler session untouched; trnscope recognises it there (see :mod:`.capture`). Its
``custom_profiler_config`` string carries the same ``key:value;key:value`` settings TorchNeuron
passes to its Kineto plugin (``profile_output_dir``, ``host_memory``, ``max_events_per_nc``,
``capture_enabled_for_nc``); trnscope itself reads the attributes.
"""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Iterable

from torch._C._profiler import _ExperimentalConfig

NEFF_CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
DEFAULT_OUTPUT_DIR = "./profile_output"
DEFAULT_MAX_EVENTS_PER_NC = 1_000_000


class ProfileMode(enum.Enum):
    """What a profile captures (TorchNeuron's ``ProfileMode``) and the files each mode writes."""

    DEVICE = "device"            # NeuronCore instructions: neff_<id>.neff + <id>_instid_0_vnc_<nc>.ntff
    RUNTIME = "runtime"          # runtime/system trace: system_trace.json
    CPU_UTIL = "cpu_util"        # host CPU utilisation samples: cpu_util.json
    HOST_MEMORY = "host_memory"  # host memory samples: host_mem.json


def _mode(m) -> ProfileMode:
    if isinstance(m, ProfileMode):
        return m
    if isinstance(m, str):
        key = m.strip().upper()
        if key in ProfileMode.__members__:
            return ProfileMode[key]
        for mode in ProfileMode:
            if mode.value == m.strip().lower():
                return mode
    valid = ", ".join(f"ProfileMode.{name}" for name in ProfileMode.__members__)
    raise ValueError(f"NeuronConfig: {m!r} is not a profile mode; expected one of {valid}")


def parse_nc_list(spec) -> frozenset[int] | None:
    """``"0,1,2-5"`` -> {0, 1, 2, 3, 4, 5}; ``None`` -> None (every NeuronCore).

    Also accepts an int or an iterable of ints. Raises ValueError with the offending token.
    """
    if spec is None:
        return None
    if isinstance(spec, bool):
        raise ValueError(f"capture_enabled_for_nc: {spec!r} is not a NeuronCore list; expected e.g. \"0,1,2-5\"")
    if isinstance(spec, int):
        spec = str(spec)
    if not isinstance(spec, str):
        try:
            items = list(spec)
        except TypeError:
            raise ValueError(f"capture_enabled_for_nc: {spec!r} is not a NeuronCore list; expected a string "
                             f"such as \"0,1,2-5\"") from None
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items):
            raise ValueError(f"capture_enabled_for_nc: {spec!r} must hold NeuronCore indices (ints >= 0)")
        if not items:
            raise ValueError("capture_enabled_for_nc: the list selects no NeuronCore")
        return frozenset(items)
    out: set[int] = set()
    tokens = [t.strip() for t in spec.split(",")]
    if not spec.strip():
        raise ValueError("capture_enabled_for_nc: empty string; expected NeuronCore indices such as \"0,1,2-5\"")
    for tok in tokens:
        lo, sep, hi = tok.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ValueError(f"capture_enabled_for_nc: {tok!r} in {spec!r} is not a NeuronCore index or range; "
                             f"expected e.g. \"0,1,2-5\"") from None
        if a < 0 or b < 0 or b < a:
            raise ValueError(f"capture_enabled_for_nc: range {tok!r} in {spec!r} is empty or negative; "
                             f"write ranges low-high, e.g. \"2-5\"")
        out.update(range(a, b + 1))
    return frozenset(out)


class NeuronConfig(_ExperimentalConfig):
    """Neuron profiling options, for ``torch.profiler.profile(experimental_config=NeuronConfig(...))``.

    Args:
        modes: what to capture (default ``[ProfileMode.DEVICE, ProfileMode.RUNTIME]``).
        profile_output_dir: root of the profile tree (``<dir>/<host>_pid_<pid>/<timestamp>/``).
        max_events_per_nc: cap on device instruction events written per NeuronCore per window.
        capture_enabled_for_nc: NeuronCores to capture, e.g. ``"0,1,2-5"`` (default: all).
        neff_cache_dir: where the framework keeps compiled NEFFs; executed NEFFs are copied from
            there into the profile (default: env ``TORCH_NEURONX_NEFF_CACHE_DIR``; else trnscope
            writes each NEFF from its Program).
        precache_node_info: keep per-NEFF device-trace tables cached across windows, so that later
            windows of a schedule do not rebuild them.
        correlate_device_time: attach each device execution to the ATen op that dispatched it, so
            ``key_averages()`` shows ``Self NEURON`` / ``NEURON total`` columns (trnscope option).
        **experimental: other ``_ExperimentalConfig`` options (e.g. ``profile_all_threads=True``).
    """

    def __init__(self, modes: Iterable[ProfileMode] | None = None, profile_output_dir=DEFAULT_OUTPUT_DIR,
                 max_events_per_nc: int = DEFAULT_MAX_EVENTS_PER_NC, capture_enabled_for_nc=None,
                 neff_cache_dir=None, precache_node_info: bool = True, correlate_device_time: bool = True,
                 **experimental) -> None:
        if modes is None:
            modes = [ProfileMode.DEVICE, ProfileMode.RUNTIME]
        if isinstance(modes, (str, ProfileMode)):
            modes = [modes]
        try:
            mode_list = [_mode(m) for m in modes]
        except TypeError:
            raise ValueError(f"NeuronConfig: modes must be a list of ProfileMode, got {modes!r}") from None
        if not mode_list:
            raise ValueError("NeuronConfig: modes is empty; name at least one ProfileMode "
                             "(the default is [ProfileMode.DEVICE, ProfileMode.RUNTIME])")
        if isinstance(max_events_per_nc, bool) or not isinstance(max_events_per_nc, int) or max_events_per_nc <= 0:
            raise ValueError(f"NeuronConfig: max_events_per_nc must be a positive int, got {max_events_per_nc!r}")
        if profile_output_dir is None or str(profile_output_dir) == "":
            raise ValueError("NeuronConfig: profile_output_dir must be a directory path")
        ncs = parse_nc_list(capture_enabled_for_nc)
        if neff_cache_dir is None:
            neff_cache_dir = os.environ.get(NEFF_CACHE_ENV) or None
        modes_unique = list(dict.fromkeys(mode_list))
        host_memory = ProfileMode.HOST_MEMORY in modes_unique or ProfileMode.CPU_UTIL in modes_unique
        custom = ";".join([
            f"profile_output_dir:{profile_output_dir}",
            f"host_memory:{str(host_memory).lower()}",
            f"max_events_per_nc:{max_events_per_nc}",
            f"capture_enabled_for_nc:{capture_enabled_for_nc if capture_enabled_for_nc is not None else 'all'}",
        ])
        experimental.setdefault("custom_profiler_config", custom)
        super().__init__(**experimental)
        self.modes: list[ProfileMode] = modes_unique
        self.profile_output_dir = Path(profile_output_dir)
        self.max_events_per_nc = max_events_per_nc
        self.capture_enabled_for_nc = capture_enabled_for_nc
        self.nc_set: frozenset[int] | None = ncs
        self.neff_cache_dir = Path(neff_cache_dir) if neff_cache_dir else None
        self.precache_node_info = bool(precache_node_info)
        self.correlate_device_time = bool(correlate_device_time)
        self._warned: set[str] = set()

    # --- what the modes imply ---------------------------------------------------------------
    def has(self, mode: ProfileMode) -> bool:
        return mode in self.modes

    @property
    def records_device(self) -> bool:
        """The runtime records executions (DEVICE or RUNTIME): device lanes and device time."""
        return self.has(ProfileMode.DEVICE) or self.has(ProfileMode.RUNTIME)

    def captures_nc(self, nc: int) -> bool:
        return self.nc_set is None or nc in self.nc_set

    def to_dict(self) -> dict:
        return {
            "modes": [m.name for m in self.modes],
            "profile_output_dir": str(self.profile_output_dir),
            "max_events_per_nc": self.max_events_per_nc,
            "capture_enabled_for_nc": self.capture_enabled_for_nc,
            "neff_cache_dir": str(self.neff_cache_dir) if self.neff_cache_dir else None,
            "precache_node_info": self.precache_node_info,
            "correlate_device_time": self.correlate_device_time,
        }

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"NeuronConfig({args})"
