"""Which kind of lane a track is, from the conventions Kineto and trnscope write.

Kineto puts device activity in processes labelled "GPU <n>" (pid = device index, tid = stream)
and host activity in the real process and threads. Categories tell the rest: device-side
activity types (kernel, gpu_memcpy, ...) never run on a host thread, while the runtime and driver
categories (cuda_runtime, privateuse1_runtime, ...) are host calls. A device process that is not a
GPU (trnscope's NeuronCores, MTIA, HPU, ...) yields ``device_queue`` lanes, one per engine or queue.
"""

from __future__ import annotations

import re

from .tracks import TrackKind

# Kineto activity types recorded on the device timeline (libkineto ActivityType.h names).
DEVICE_CATEGORIES = frozenset(
    {
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "gpu_user_annotation",
        "cuda_sync",
        "mtia_ccp_events",
        "hpu_op",
    }
)

_GPU_PROCESS = re.compile(r"^\s*GPU\b", re.IGNORECASE)
_GPU_LANE = re.compile(r"^\s*stream\b", re.IGNORECASE)
# Names of non-GPU accelerator processes; trnscope labels its device processes "NeuronCore <n>".
_OTHER_DEVICE = re.compile(r"\b(neuron\w*|mtia|hpu|xpu|tpu)\b", re.IGNORECASE)


def classify(
    *,
    is_counter: bool,
    pid: object,
    tid: object,
    thread_name: str,
    process_name: str,
    process_labels: str,
    device_fraction: float,
) -> TrackKind:
    """``device_fraction``: share of the track's slices whose category is in DEVICE_CATEGORIES."""
    if is_counter:
        return TrackKind.COUNTER
    gpu_process = bool(_GPU_PROCESS.match(process_labels) or _GPU_PROCESS.match(process_name))
    other_device = bool(_OTHER_DEVICE.search(process_labels) or _OTHER_DEVICE.search(process_name))
    if gpu_process or other_device or device_fraction > 0.5:
        if gpu_process or _GPU_LANE.match(thread_name) or not other_device:
            return TrackKind.GPU_STREAM
        return TrackKind.DEVICE_QUEUE
    if _is_os_id(pid) and _is_os_id(tid):
        return TrackKind.CPU_THREAD
    return TrackKind.OTHER


def _is_os_id(value: object) -> bool:
    # Kineto's own lanes use names ("Spans", "Traces", "") where real ones carry numbers.
    return isinstance(value, int) and not isinstance(value, bool)
