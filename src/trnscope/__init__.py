"""trnscope: profile PyTorch for AWS Trainium on an emulated NeuronCore.

``import trnscope`` registers the PyTorch device ``neuron`` (PrivateUse1), installs
``torch.neuron``, the ``neuron`` torch.compile backend and connects the device to the emulated
Neuron runtime: at once when torch is already imported, otherwise as soon as torch (or a part of
trnscope that needs it) has been imported. So viewing profiles (``trnscope.trace``,
``trnscope.analysis``, ``trnscope.explorer``) never imports torch. With ``TRNSCOPE_NO_DEVICE=1``,
and for the ``trnscope`` commands that only read profiles, the device is not registered at all.
"""

import os as _os
import sys as _sys
import threading as _threading

from .caches import reset_caches as reset_caches  # trnscope.reset_caches(): every in-memory cache

__version__ = "0.1.0"


def enable_device() -> None:
    """Register ``neuron`` with PyTorch and route its ops to the emulated runtime (idempotent)."""
    from . import device
    from .device import fused_ops
    from .device.runtime_bridge import EXECUTOR

    fused_ops.register()
    from .distributed import register as register_distributed

    register_distributed()
    if device.dispatch.get_executor() is not EXECUTOR:
        device.set_executor(EXECUTOR)


def _viewing_only() -> bool:
    if _os.environ.get("TRNSCOPE_NO_DEVICE", "0") == "1":
        return True
    argv = _sys.argv
    # the console script, or `python -m trnscope` (argv[0] is "-m" while the package is located)
    cli = len(argv) >= 2 and (_os.path.basename(argv[0]) == "trnscope" or argv[0] == "-m" or
                              argv[0].endswith(_os.path.join("trnscope", "__main__.py")))
    if not cli:
        return False
    from .cli.main import torch_free  # the CLI's registry says which commands only read files

    return torch_free(argv[1:])


class _EnableDeviceAfterTorch:
    """Meta-path finder that registers the device once torch has been imported.

    Importing torch takes seconds, and ``import trnscope.trace`` runs this file first; so the
    device waits for torch. The finder watches the import of ``torch`` and of trnscope's own
    modules (some import torch while they load) and registers when the outermost of those
    imports has finished, so enable_device() never sees a half-initialised trnscope.device.
    """

    def __init__(self) -> None:
        self._depth = _threading.local()

    def find_spec(self, name, path=None, target=None):
        if name != "torch" and not name.startswith(__name__ + "."):
            return None
        for finder in _sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is not None and not getattr(exec_module, "_counted", False):
            # Patched on the module's own loader object, so its type (and everything that
            # inspects it) stays as it was; a loader shared by many modules is patched once.
            loader.exec_module = self._counted(exec_module)
        return spec

    def _counted(self, exec_module):
        def run(module):
            depth = getattr(self._depth, "value", 0)
            self._depth.value = depth + 1
            try:
                exec_module(module)
            finally:
                self._depth.value = depth
            if depth == 0 and "torch" in _sys.modules and self in _sys.meta_path:
                _sys.meta_path.remove(self)
                enable_device()

        run._counted = True
        return run


if not _viewing_only():
    if "torch" in _sys.modules:
        enable_device()
    elif not any(isinstance(f, _EnableDeviceAfterTorch) for f in _sys.meta_path):
        _sys.meta_path.insert(0, _EnableDeviceAfterTorch())
