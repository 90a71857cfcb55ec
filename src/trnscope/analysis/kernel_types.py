"""What kind of work a device execution is: computation, communication, memory or other.

The classes and name patterns are Holistic Trace Analysis' (``hta/common/types.py``:
``CommunicateKernelGroupingPattern``, ``MemoryKernelGroupingPattern``,
``ComputeKernelGroupingPattern``), so the kernel-type breakdown and the communication /
computation overlap mean what they mean in HTA. Two deliberate differences, both from the event
category, which HTA does not look at:

* a Kineto ``gpu_memcpy`` / ``gpu_memset`` event (and a trnscope host<->device copy) is memory
  whatever its name; HTA decides by name alone, and its communication pattern ``^hip`` comes first,
  so a ROCm ``hipMemcpy...`` would count there as communication;
* HTA's ``^hip`` communication pattern is not used for the same reason (ROCm's collectives are
  RCCL kernels named ``ncclKernel...``/``ncclDevKernel...``, which the nccl patterns match).

NEFF executions are computation unless their name says collective communication.
"""

from __future__ import annotations

import re

COMPUTATION = "computation"
COMMUNICATION = "communication"
MEMORY = "memory"
OTHER = "other"
# the three classes HTA's kernel-type breakdown and overlap are computed over, in its order
BREAKDOWN_TYPES = (COMPUTATION, COMMUNICATION, MEMORY)

_COMMUNICATION = re.compile(r"(^nccl)|(^rccl)|(^hccl)|(.*ncclKernel)|(.*ncclDevKernel)")
_MEMORY = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
# HTA: anything matching this is not computation (runtime calls and sync markers that reach a
# device lane, MTIA's job and packet spans, collectives)
_NOT_COMPUTATION = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)|(^runFunction)"
    r"|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)")
MEMORY_CATEGORIES = frozenset({"gpu_memcpy", "gpu_memset"})


def kernel_type(name: str, category: str = "", is_copy: bool = False) -> str:
    if is_copy or category in MEMORY_CATEGORIES:
        return MEMORY
    if _COMMUNICATION.match(name):
        return COMMUNICATION
    if _MEMORY.match(name):
        return MEMORY
    if _NOT_COMPUTATION.match(name):
        return OTHER
    return COMPUTATION
