"""Every place where trnscope changes a part of PyTorch that PyTorch offers no API for.

Nothing else in trnscope assigns to torch's modules, classes or bindings: each adaptation is
declared here (what it replaces, why, on which path) with a check that fails loudly, naming what
moved, when torch changes what it relies on. Kernel registrations through ``torch.library`` for
the PrivateUse1 key, the C++ core's registrations (``_core``) and the public
``torch.utils.rename_privateuse1_backend``/``_register_device_module`` steps are PyTorch's
supported extension points and are not listed.

On the C++ path (:mod:`._core` loaded) only the profiler adaptation remains: the C++
registrations give PyTorch the device guard, allocator and pinned memory that the Python path has
to stand in for.

:func:`install` applies the adaptations of the current path (once, from
:func:`trnscope.device.registration.register`); :func:`check` lists what torch changed without
applying anything (``trnscope.profiling.check_torch_internals`` and a test call it).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import torch

PINNED_TORCH = "2.13."  # the torch these adaptations were written and tested against


class TorchChanged(RuntimeError):
    """A part of torch an adaptation replaces is gone or has changed shape."""


@dataclass(frozen=True)
class Adaptation:
    name: str
    replaces: str  # what of torch it changes
    why: str  # what PyTorch offers no supported way to do
    python_path_only: bool  # not needed once the C++ core is registered
    check: Callable[[], list[str]]  # what torch changed ([] when all is as expected)
    apply: Callable[[], None]


_applied: dict[str, bool] = {}
_originals: dict[tuple[int, str], object] = {}


def replace(owner, attr: str, new) -> object:
    """Set ``owner.attr = new`` (remembering the original once); returns the original."""
    key = (id(owner), attr)
    if key not in _originals:
        _originals[key] = getattr(owner, attr)
    setattr(owner, attr, new)
    return _originals[key]


def original(owner, attr: str):
    """What ``owner.attr`` was before :func:`replace` (the attribute itself if never replaced)."""
    return _originals.get((id(owner), attr), getattr(owner, attr))


def _params(fn) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


# --- both paths: torch.profiler --------------------------------------------------------------


def _check_profiler_capture() -> list[str]:
    from ..profiling import capture

    problems = []
    for name, params in capture.EXPECTED.items():
        fn = _originals.get((id(capture.Profile), name)) or getattr(capture.Profile, name, None)
        if fn is None:
            problems.append(f"torch.autograd.profiler.profile.{name} is gone")
        elif _params(fn) != params:
            problems.append(f"torch.autograd.profiler.profile.{name}{tuple(_params(fn))} != expected {tuple(params)}")
    return problems + capture.check_other_internals()


def _apply_profiler_capture() -> None:
    from ..profiling import capture

    for name, fn in capture.REPLACEMENTS.items():
        fn.__name__ = name
        fn.__doc__ = getattr(original(capture.Profile, name), "__doc__", None)
        capture.ORIGINALS[name] = replace(capture.Profile, name, fn)


# --- the Python path: what the C++ registrations would give PyTorch ----------------------------


def _check_accelerator() -> list[str]:
    from . import accelerator

    return [f"torch._C.{n} is gone" for n in accelerator.BINDINGS if not hasattr(torch._C, n)]


def _apply_accelerator() -> None:
    from . import accelerator

    for name, binding in accelerator.BINDINGS.items():
        accelerator.ORIGINALS[name] = replace(torch._C, name, binding)


def _check_autograd_engine() -> list[str]:
    from torch.autograd.variable import Variable

    problems = []
    if not isinstance(original(Variable, "_execution_engine"), torch._C._ImperativeEngine):
        problems.append("torch.autograd.variable.Variable._execution_engine is no longer a torch._C._ImperativeEngine")
    for n in ("_is_multithreading_enabled", "_set_multithreading_enabled"):
        if not hasattr(torch._C, n):
            problems.append(f"torch._C.{n} is gone")
    return problems


def _apply_autograd_engine() -> None:
    from torch.autograd.variable import Variable

    from . import accelerator

    replace(Variable, "_execution_engine", accelerator.Engine())


def _check_tensor_to() -> list[str]:
    return [] if callable(original(torch.Tensor, "to")) else ["torch.Tensor.to is gone"]


def _apply_tensor_to() -> None:
    from . import _devices, accelerator

    # wrapped only once a thread makes a core other than 0 current: until then every "neuron"
    # without an index means neuron:0 anyway, and Tensor.to stays torch's own
    _devices.on_other_core = lambda: replace(torch.Tensor, "to", accelerator.tensor_to(original(torch.Tensor, "to")))


def _check_storage_new() -> list[str]:
    return [] if callable(original(torch.UntypedStorage, "__new__")) else ["torch.UntypedStorage.__new__ is gone"]


def _apply_storage_new() -> None:
    from . import registration

    replace(torch.UntypedStorage, "__new__", registration.storage_new(original(torch.UntypedStorage, "__new__")))


def _check_pinned_factories() -> list[str]:
    from . import pinned

    return [f"torch.{n} is gone" for n in pinned.FACTORIES if not callable(getattr(torch, n, None))]


def _apply_pinned_factories() -> None:
    from . import pinned

    for name, fill in pinned.FACTORIES.items():
        replace(torch, name, pinned.wrap_factory(original(torch, name), name, fill))


def _check_pin_kernels() -> list[str]:
    from . import pinned

    if pinned.kernels_registered():
        return []
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return [f"aten::{n} has a CPU kernel of its own now (trnscope's would replace it)"
            for n in ("_pin_memory", "is_pinned") if has(f"aten::{n}", "CPU")]


def _apply_pin_kernels() -> None:
    from . import pinned

    pinned.register_kernels()


ADAPTATIONS: dict[str, Adaptation] = {a.name: a for a in (
    Adaptation(
        "profiler_capture", "torch.autograd.profiler.profile._start_trace, __exit__, _parse_kineto_results, "
        "export_chrome_trace", "device kernels join torch's events and export, and the emulated clock keeps "
        "its history (for mapping torch's timestamps) while a session records; PrivateUse1 has no "
        "profiler plugin API in Python", False, _check_profiler_capture, _apply_profiler_capture),
    Adaptation(
        "accelerator_bindings", "14 torch._C._accelerator_* bindings (device index, streams, "
        "synchronize, memory statistics)", "a Python backend cannot register a DeviceGuardImpl or "
        "DeviceAllocator, so ATen's answers are device 0 of 1 and no memory", True,
        _check_accelerator, _apply_accelerator),
    Adaptation(
        "autograd_engine", "torch.autograd.variable.Variable._execution_engine",
        "autograd sizes its per-device queues from the guard's count (1 without a C++ guard): "
        "backward runs on the calling thread once a core other than 0 is used", True,
        _check_autograd_engine, _apply_autograd_engine),
    Adaptation(
        "tensor_to", "torch.Tensor.to", "ATen fills in a missing device index from the guard "
        "(always 0 without a C++ guard)", True, _check_tensor_to, _apply_tensor_to),
    Adaptation(
        "storage_new", "torch.UntypedStorage.__new__", "torch.UntypedStorage(n, device='neuron') "
        "asks ATen for a PrivateUse1 allocator, which Python cannot register", True,
        _check_storage_new, _apply_storage_new),
    Adaptation(
        "pinned_factories", "torch.empty, empty_strided, empty_like, zeros, ones, full, tensor and their "
        "*_like forms", "with pin_memory=True they ask the PrivateUse1 hooks for a pinned allocator, "
        "which Python hooks cannot provide", True, _check_pinned_factories, _apply_pinned_factories),
    Adaptation(
        "pin_kernels", "CPU kernels for aten::_pin_memory and aten::is_pinned (their only kernels are "
        "CompositeExplicitAutograd ones; they run only for pin_memory()/is_pinned() calls)",
        "the same pinned allocator and isPinnedPtr hooks", True, _check_pin_kernels, _apply_pin_kernels),
)}


def active(cpp: bool) -> list[Adaptation]:
    """The adaptations the current path needs."""
    return [a for a in ADAPTATIONS.values() if not (cpp and a.python_path_only)]


def check(names=None) -> list[str]:
    """What torch changed that the named adaptations (default: all) rely on, as sentences."""
    problems = []
    if not torch.__version__.startswith(PINNED_TORCH):
        problems.append(f"torch {torch.__version__} (trnscope's torch adaptations are written for torch {PINNED_TORCH}x)")
    for a in ADAPTATIONS.values():
        if names is None or a.name in names:
            problems.extend(f"{a.name}: {p}" for p in a.check())
    return problems


def apply(name: str) -> None:
    """Apply one adaptation (once); raises :class:`TorchChanged` if torch moved what it replaces."""
    if _applied.get(name):
        return
    a = ADAPTATIONS[name]
    problems = a.check()
    if problems:
        raise TorchChanged(f"trnscope cannot adapt torch {torch.__version__} ({a.replaces}): " + "; ".join(problems)
                           + f". trnscope is tested with torch {PINNED_TORCH}x; install that version.")
    a.apply()
    _applied[name] = True


def install(cpp: bool) -> None:
    """Apply the device adaptations of the current path (the profiler capture is applied by
    :mod:`trnscope.profiling`, which needs it)."""
    for a in active(cpp):
        if a.name != "profiler_capture":
            apply(a.name)


def applied() -> list[str]:
    return [n for n, done in _applied.items() if done]
