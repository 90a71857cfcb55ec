"""trnscope's C++ core of the ``neuron`` device (``csrc/``), built with ``torch.utils.cpp_extension``.

What it registers for PrivateUse1, as PyTorch expects of an out-of-tree device (PyTorch's own
test backend, openreg, registers the same pieces): a ``DeviceGuardImpl`` (the current NeuronCore
per thread, the current stream per core, events on the emulated device clock), a
``DeviceAllocator`` (device memory over host buffers, counted per core), a
``PrivateUse1HooksInterface`` (device count, pinned host memory, default generators) and a host
allocator for pinned memory. With them PyTorch's C++ side knows the device: ``torch.tensor(...,
device="neuron")`` after ``torch.neuron.set_device(1)`` lands on ``neuron:1``, autograd gives each
core its own worker thread, ``torch.accelerator`` works unpatched, every factory accepts
``pin_memory=True``.

:data:`CORE` is the loaded module, or None on the Python path:

* ``TRNSCOPE_CPP=0`` forces the Python path (PyTorch's Python backend hooks, and the adaptations
  of :mod:`.torch_adaptations` that stand in for the C++ registrations);
* ``TRNSCOPE_CPP=1`` requires the core: a failed build is an error;
* unset: the core is built (once per source version, torch version and Python version, in
  ``$TRNSCOPE_CPP_BUILD_DIR`` or the user cache directory) and loaded at the first import; a
  machine that cannot build it gets one warning naming the reason and the fix, and the Python path.

Loading the module registers nothing: :func:`install` does, from :func:`trnscope.device.registration.register`.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

ENV = "TRNSCOPE_CPP"
BUILD_DIR_ENV = "TRNSCOPE_CPP_BUILD_DIR"
NAME = "trnscope_neuron_core"
SOURCES = ("module.cpp", "guard.cpp", "allocator.cpp", "hooks.cpp", "runtime.cpp", "eager.cpp")
CSRC = Path(__file__).with_name("csrc")


class CppCoreUnavailable(UserWarning):
    """The C++ core could not be built or loaded; trnscope runs on its Python path."""


def build_dir() -> Path:
    env = os.environ.get(BUILD_DIR_ENV)
    if env:
        return Path(env)
    import platformdirs
    import torch

    tag = f"torch{torch.__version__.replace('+', '_')}-py{sys.version_info.major}{sys.version_info.minor}"
    return Path(platformdirs.user_cache_dir("trnscope")) / "cpp" / tag


def _mode() -> str:
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return "off"
    if value in ("1", "true", "yes", "on"):
        return "required"
    return "auto"


def _ninja_on_path() -> None:
    """torch.utils.cpp_extension runs ``ninja`` from PATH; the PyPI package (pinned in
    pyproject.toml) installs it next to the interpreter, which a venv's python run by its path does
    not put on PATH."""
    try:
        import ninja
    except ImportError:
        return
    bin_dir = getattr(ninja, "BIN_DIR", None)
    path = os.environ.get("PATH", "")
    if bin_dir and bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = bin_dir + (os.pathsep + path if path else "")


BUILD_SECONDS: float | None = None  # how long this process spent building or loading the core

# torch.utils.cpp_extension serialises builds with a ``lock`` file that only the building process
# removes: a build killed half-way (a timeout, Ctrl-C, kill of a test run) leaves it, and every later
# import waits for it forever. A build writes its objects as it goes; a lock with nothing in the
# directory touched for this long has no build behind it (compiling the core takes 1-3 minutes on
# a 2-core machine, one object file at most ~2 of them under load).
STALE_LOCK_SECONDS = 600.0


def _clear_stale_lock(directory: Path, stale_after_s: float = STALE_LOCK_SECONDS, wait_s: float = 1.0) -> None:
    """Wait while a live build holds ``directory``'s lock; remove a lock no build has touched for
    ``stale_after_s`` seconds (with a warning naming it), so the next build or load can go on."""
    lock = directory / "lock"
    while True:
        try:
            lock_time = lock.stat().st_mtime
        except FileNotFoundError:
            return
        latest = lock_time
        for p in directory.iterdir():
            try:
                latest = max(latest, p.stat().st_mtime)
            except FileNotFoundError:
                continue
        idle = time.time() - latest
        if idle >= stale_after_s:
            warnings.warn(
                f"trnscope: removed {lock}, a C++ build lock nothing has touched for {idle / 60:.0f} minutes "
                f"(left by a build that was killed); the core is built again now", CppCoreUnavailable,
                stacklevel=3)
            lock.unlink(missing_ok=True)
            return
        # a live build: let it finish (torch would wait too), re-checking that it still makes progress
        time.sleep(min(wait_s, stale_after_s - idle))


def _load():
    global BUILD_SECONDS
    import torch.utils.cpp_extension as ext

    directory = build_dir()
    directory.mkdir(parents=True, exist_ok=True)
    _ninja_on_path()
    start = time.perf_counter()
    _clear_stale_lock(directory)
    module = ext.load(
        name=NAME,
        sources=[str(CSRC / s) for s in SOURCES],
        extra_cflags=["-O2"],
        build_directory=str(directory),
        verbose=False,
    )
    BUILD_SECONDS = time.perf_counter() - start
    return module


def load():
    """The C++ core module, or None (see the module docstring)."""
    mode = _mode()
    if mode == "off":
        return None
    try:
        return _load()
    except Exception as exc:  # noqa: BLE001 - any build or load failure means the Python path
        if mode == "required":
            raise ImportError(f"trnscope: {ENV}=1 but the C++ core could not be built: {exc}") from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        warnings.warn(
            f"trnscope: the C++ core of the neuron device could not be built ({first}); running on the "
            f"slower Python path. It needs a C++17 compiler (g++) and ninja (`make install` brings ninja; "
            f"apt-get install g++ brings the compiler). Set {ENV}=0 to choose the Python path and silence "
            f"this warning.", CppCoreUnavailable, stacklevel=2)
        return None


CORE = load()


class _Bridge:
    """What the C++ core asks the Python runtime (cold paths only: events, synchronisation, the
    device count and capacity of the spec in force, stream changes made from C++)."""

    def device_count(self) -> int:
        from . import _devices

        return _devices.device_count()

    def invalid_device_message(self, index: int) -> str:
        from . import _devices

        return _devices.invalid_device_message(index)

    def capacity(self, device: int) -> int:
        from . import memory

        return memory.capacity(device)

    def stream_changed(self, device: int, stream_id: int) -> None:
        from . import streams

        streams.stream_changed(device, stream_id)

    def record_event(self, device: int, stream_id: int) -> int:
        from .. import runtime

        return runtime.core(device).record_event(stream_id)

    def stream_wait(self, device: int, stream_id: int, ns: int) -> None:
        from .. import runtime

        runtime.core(device).stream_wait(stream_id, ns)

    def now(self) -> int:
        from .. import runtime

        return runtime.CLOCK.now()

    def wait_until(self, ns: int) -> None:
        from .. import runtime

        runtime.CLOCK.wait_until(ns)

    def stream_done_ns(self, device: int, stream_id: int) -> int:
        from .. import runtime

        return runtime.core(device).stream_done_ns(stream_id)

    def synchronize_stream(self, device: int, stream_id: int) -> None:
        from .. import runtime

        runtime.core(device).synchronize_stream(stream_id)

    def synchronize(self, device: int) -> None:
        from . import dispatch

        dispatch.synchronize(device)


def install() -> None:
    """Register the guard, allocator, hooks and pinned allocator for PrivateUse1 (once), and keep the
    runtime's clock and queues in the core (its eager path advances them)."""
    from .. import runtime
    from . import memory

    CORE.install(_Bridge())
    CORE.set_pool_limits(memory.POOL_BYTES, memory.POOL_FLOOR)
    runtime.use_native(CORE)



def report() -> str:
    """One line saying where the core is and how long this process took to build or load it."""
    if CORE is None:
        return "trnscope C++ core: not built (Python path)"
    return f"trnscope C++ core: {CORE.__file__} ({BUILD_SECONDS:.1f} s to build or load)"
