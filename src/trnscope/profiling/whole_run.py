"""Profile a whole script run (``trnscope run --profile DIR script.py``).

One torch.profiler session with ``NeuronConfig(modes=[DEVICE, RUNTIME], profile_output_dir=DIR)``
around the run; at the end the device is synchronised and the profile exported with
``NeuronProfiler``. The script must not start a torch.profiler session of its own while this one
records (Kineto allows one session per process).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from .config import NeuronConfig, ProfileMode
from .export import NeuronProfiler


@contextmanager
def profile_whole_run(out_dir, console=None, modes=(ProfileMode.DEVICE, ProfileMode.RUNTIME)):
    cfg = NeuronConfig(modes=list(modes), profile_output_dir=Path(out_dir))
    exporter = NeuronProfiler(cfg)
    failure: BaseException | None = None
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
                 record_shapes=True) as prof:
        try:
            yield prof
        except BaseException as exc:  # the script failed: what it recorded is still written, marked partial
            failure = exc
            _mark_incomplete(exc)
        try:
            torch.neuron.synchronize()
        except Exception:
            pass
    where = exporter.export_trace(prof)
    if console is not None and where is not None:
        console.print(f"profile written to {where}" + (" (incomplete: the script failed)" if failure else ""))
    if failure is not None:
        raise failure


def _mark_incomplete(exc: BaseException) -> None:
    """A multi-rank run's trace says the rank stopped early, and why (trnscope.distributed)."""
    import torch.distributed as dist

    if isinstance(exc, SystemExit) and not exc.code:
        return
    if dist.is_available() and dist.is_initialized():
        from ..distributed.state import rank_state

        rank_state().incomplete = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]
