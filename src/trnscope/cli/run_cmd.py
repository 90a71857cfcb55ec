"""``trnscope run SCRIPT [ARGS]``: run a PyTorch script on the emulated NeuronCore.

For the run, ``import torch_neuronx``, ``from torch_neuronx.profiling import NeuronConfig,
ProfileMode, NeuronProfiler`` and ``import torch_neuronx.metrics`` resolve to trnscope, and so do
``import nki`` (``nki.language``, ``nki.isa``), ``neuronxcc.nki`` and ``from torch_neuronx import nki_op,
wrap_nki``, so scripts written for TorchNeuron and NKI kernel files run unmodified. ``--profile DIR``
profiles the whole script (DEVICE + RUNTIME) into DIR.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def install_torch_neuronx_alias() -> types.ModuleType:
    """Make ``torch_neuronx`` (and ``torch_neuronx.profiling``) name trnscope for this process."""
    import torch

    import trnscope

    trnscope.enable_device()
    mod: Any = types.ModuleType("torch_neuronx", "trnscope standing in for TorchNeuron")
    mod.__path__ = []  # a package, so `torch_neuronx.profiling` can be imported
    neuron = torch.neuron
    for name in ("synchronize", "device_count", "is_available", "current_device", "set_device", "Stream",
                 "Event", "manual_seed", "manual_seed_all"):
        if hasattr(neuron, name):
            setattr(mod, name, getattr(neuron, name))
    if hasattr(neuron, "stream"):
        mod.stream = neuron.stream
    from trnscope import nki
    from trnscope.nki.torch_ops import nki_op, wrap_nki

    nki.install_aliases()  # import nki / nki.language / nki.isa / neuronxcc.nki resolve to trnscope.nki
    mod.nki, mod.nki_op, mod.wrap_nki = nki, nki_op, wrap_nki
    sys.modules["torch_neuronx"] = mod
    from trnscope import metrics

    mod.metrics = metrics
    sys.modules["torch_neuronx.metrics"] = metrics
    try:
        from trnscope import profiling

        mod.profiling = profiling
        sys.modules["torch_neuronx.profiling"] = profiling
    except ImportError:  # profiling not available: the alias still serves the device
        pass
    return mod


class RunCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("script", type=Path)
        parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
        parser.add_argument("--profile", type=Path, metavar="DIR",
                            help="profile the whole run (DEVICE + RUNTIME modes) into DIR (with --nproc: one "
                                 "directory per rank under DIR/rank_<RANK>)")
        from ..distributed import launch

        launch.add_arguments(parser)

    def run(self, args: argparse.Namespace, console: Console) -> int:
        script: Path = args.script
        if not script.is_file():
            raise ValueError(f"{script}: no such script")
        from ..distributed import launch

        if launch.wanted(args):
            return launch.launch(args, console)
        profile_dir = args.profile
        if profile_dir is not None and launch.in_worker():
            profile_dir = launch.rank_profile_dir(profile_dir)
            os.environ.setdefault("NEURON_RT_VISIBLE_CORES", os.environ.get("LOCAL_RANK", "0"))
        install_torch_neuronx_alias()
        saved_argv = sys.argv
        sys.argv = [str(script), *args.args]
        sys.path.insert(0, str(script.resolve().parent))
        try:
            if profile_dir:
                from ..profiling.whole_run import profile_whole_run

                with profile_whole_run(profile_dir, console):
                    runpy.run_path(str(script), run_name="__main__")
            else:
                runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exc:
            return int(exc.code or 0) if not isinstance(exc.code, str) else 1
        finally:
            sys.argv = saved_argv
            sys.path.remove(str(script.resolve().parent))
        return 0
