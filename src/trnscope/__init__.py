"""trnscope: profile PyTorch for AWS Trainium on an emulated NeuronCore.

``import trnscope`` registers the PyTorch device ``neuron`` (PrivateUse1), installs
``torch.neuron``, the ``neuron`` torch.compile backend and connects the device to the emulated
Neuron runtime. Viewing profiles (``trnscope.trace``, ``trnscope.analysis``,
``trnscope.explorer``) never needs torch: with ``TRNSCOPE_NO_DEVICE=1``, and for the ``trnscope``
commands that only read profiles, the package imports without torch.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"

# commands of the `trnscope` CLI that only read files: they must start fast, without torch
VIEW_COMMANDS = {"view", "summary", "diff", "inspect", "export"}


def enable_device() -> None:
    """Register ``neuron`` with PyTorch and route its ops to the emulated runtime (idempotent)."""
    from . import device
    from .device import fused_ops
    from .device.runtime_bridge import EXECUTOR

    fused_ops.register()
    if device.dispatch.get_executor() is not EXECUTOR:
        device.set_executor(EXECUTOR)


def _viewing_only() -> bool:
    if _os.environ.get("TRNSCOPE_NO_DEVICE", "0") == "1":
        return True
    argv = _sys.argv
    if len(argv) < 2 or argv[1] not in VIEW_COMMANDS:
        return False
    # the console script, or `python -m trnscope` (argv[0] is "-m" while the package is located)
    return _os.path.basename(argv[0]) == "trnscope" or argv[0] == "-m" or \
        argv[0].endswith(_os.path.join("trnscope", "__main__.py"))


if not _viewing_only():
    enable_device()
