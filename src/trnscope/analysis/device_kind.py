"""Which accelerator a profile was recorded on: advice has to be given in that device's terms.

Decided from what the trace itself says, most specific first:

* a trnscope profile directory, or device processes named ``neuron:<n>``: **neuron**;
* the runtime API's category or names: ``hip_runtime`` or ``hip*`` calls (``hipLaunchKernel``; some
  Kineto builds file ROCm's calls under ``cuda_runtime``): **rocm**; ``mtia_runtime``, MTIA process
  labels or an ``mtia:hccl`` distributed backend: **mtia**; ``xpu_runtime``: **xpu**;
  ``cuda_runtime`` / ``cuda_driver``: **cuda**;
* ``deviceProperties`` names (AMD / Instinct / Radeon, NVIDIA / Tesla);
* device lanes with none of the above: **accelerator**; no device lanes: **cpu**.

HTA makes the same call from ``cudaLaunchKernel`` / ``hipLaunchKernel`` / MTIA's
``runFunction`` names (``infer_gpu_type``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np

from ..trace import Trace
from .lanes import Role, lane_infos

NEURON = "neuron"
CUDA = "cuda"
ROCM = "rocm"
MTIA = "mtia"
XPU = "xpu"
ACCELERATOR = "accelerator"
CPU = "cpu"

# what the device's runtime API and its lanes are called in that world
RUNTIME_TITLES = {NEURON: "Neuron runtime", CUDA: "CUDA runtime", ROCM: "HIP runtime", MTIA: "MTIA runtime",
                  XPU: "XPU runtime"}
LABELS = {NEURON: "AWS Neuron", CUDA: "NVIDIA GPU", ROCM: "AMD GPU", MTIA: "Meta MTIA", XPU: "Intel XPU",
          ACCELERATOR: "accelerator", CPU: "CPU only"}

_AMD = re.compile(r"\b(AMD|Instinct|Radeon|MI\d{2,3}[A-Z]?)\b", re.IGNORECASE)
_NVIDIA = re.compile(r"\b(NVIDIA|Tesla|GeForce|Quadro)\b", re.IGNORECASE)
_NEURON_PROCESS = re.compile(r"^neuron:\d+$")


@dataclass(frozen=True)
class DeviceKind:
    kind: str
    label: str  # "NVIDIA GPU (A100-SXM4-40GB)", "AWS Neuron (trn2)"
    runtime_title: str  # how its runtime API lanes are titled

    def to_dict(self) -> dict:
        return asdict(self)


def device_kind(trace: Trace, neuron_profile: bool = False, target: str | None = None) -> DeviceKind:
    """``target``: the Neuron target the NTFFs name (trn1, trn2), when known."""
    kind = _kind(trace, neuron_profile)
    detail = (target or "") if kind == NEURON else _detail(trace, kind)
    label = LABELS[kind] + (f" ({detail})" if detail else "")
    return DeviceKind(kind=kind, label=label, runtime_title=RUNTIME_TITLES.get(kind, "Runtime API"))


def _kind(trace: Trace, neuron_profile: bool) -> str:
    if neuron_profile or trace.metadata.get("neuron"):
        return NEURON
    infos = lane_infos(trace)
    device_tracks = [i.track for i in infos if i.role is Role.DEVICE_STREAM]
    if any(_NEURON_PROCESS.match(trace.tracks[t].process_name or "") for t in device_tracks):
        return NEURON
    categories = _categories(trace)
    if "hip_runtime" in categories or _has_name(trace, ("hipLaunchKernel", "hipModuleLaunchKernel",
                                                          "hipExtModuleLaunchKernel", "hipMemcpyAsync")):
        return ROCM
    backend = str((trace.metadata.get("distributedInfo") or {}).get("backend") or "")
    labels = {str(trace.tracks[t].process_labels or "") for t in device_tracks}
    if "mtia_runtime" in categories or "mtia_ccp_events" in categories or "mtia" in backend.lower() \
            or any("MTIA" in label.upper() for label in labels):
        return MTIA
    if "xpu_runtime" in categories:
        return XPU
    if categories & {"cuda_runtime", "cuda_driver"}:
        return CUDA
    names = " ".join(_device_names(trace))
    if _AMD.search(names):
        return ROCM
    if _NVIDIA.search(names):
        return CUDA
    return ACCELERATOR if device_tracks else CPU


def _detail(trace: Trace, kind: str) -> str:
    names = sorted(set(_device_names(trace)))
    return ", ".join(names[:2])


def _device_names(trace: Trace) -> list[str]:
    props = trace.metadata.get("deviceProperties")
    if not isinstance(props, list):
        return []
    return [str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")]


def _categories(trace: Trace) -> set[str]:
    if not len(trace.slices):
        return set()
    return set(trace.strings.lookup(np.unique(trace.slices.cat)).tolist())


def _has_name(trace: Trace, names) -> bool:
    return any(trace.strings.id_of(n) is not None for n in names)
