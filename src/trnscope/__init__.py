"""trnscope: profile PyTorch for AWS Trainium on an emulated NeuronCore.

``import trnscope`` registers the PyTorch device ``neuron`` (PrivateUse1), installs
``torch.neuron`` and connects the device to the emulated Neuron runtime. The trace viewing side
(``trnscope.trace``, ``trnscope.analysis``, ``trnscope.explorer``) never needs torch: set
``TRNSCOPE_NO_DEVICE=1`` to import the package without registering the device.
"""

import os as _os

__version__ = "0.1.0"

if _os.environ.get("TRNSCOPE_NO_DEVICE", "0") != "1":
    from . import device  # noqa: F401  (registers `neuron`)
    from .device import fused_ops as _fused_ops
    from .device.runtime_bridge import EXECUTOR as _EXECUTOR

    _fused_ops.register()
    device.set_executor(_EXECUTOR)
