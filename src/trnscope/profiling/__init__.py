"""trnscope.profiling: TorchNeuron's profiling API on the emulated NeuronCore.

    from trnscope.profiling import NeuronConfig, ProfileMode, NeuronProfiler

    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir="./profile_output")
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                                experimental_config=cfg, on_trace_ready=NeuronProfiler(cfg).export_trace,
                                schedule=torch.profiler.schedule(wait=0, warmup=1, active=2)) as prof:
        for _ in range(3):
            model(x)
            torch.neuron.synchronize()
            prof.step()
    print(prof.key_averages().table(sort_by="self_privateuse1_time_total"))

Importing this package hooks torch.profiler (see :mod:`.capture`); docs/profiling.md describes the
capture, the correlation and every file of a profile directory.
"""

import trnscope as _trnscope  # noqa: F401  (registers the neuron device)

from .capture import NeuronProfilerWarning, check_torch_internals, install as _install
from .config import NeuronConfig, ProfileMode, parse_nc_list
from .export import NeuronProfiler

_install()

__all__ = ["NeuronConfig", "NeuronProfiler", "NeuronProfilerWarning", "ProfileMode", "check_torch_internals",
           "parse_nc_list"]
