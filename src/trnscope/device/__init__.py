"""PyTorch integration: the emulated NeuronCore as the PyTorch device ``neuron``.

Importing this package registers PyTorch's PrivateUse1 backend as ``neuron`` through PyTorch's
Python backend path (:mod:`.registration`) and installs ``torch.neuron`` (:mod:`.neuron`). From
then on ``neuron`` works like any device: ``x.to("neuron")``, factories with ``device="neuron"``,
views and aliasing, autograd, ``nn.Module.to``, optimizers, ``torch.save``/``torch.load``,
``torch.autocast(device_type="neuron")`` (:mod:`.autocast`).

The device guard, allocator, hooks and generator PyTorch's C++ side asks for are registered in
C++ by the device's C++ core (:mod:`._core`, built at the first import), or, where it cannot be
built or ``TRNSCOPE_CPP=0``, stood in for from Python (:mod:`.torch_adaptations`).

How a ``neuron`` tensor holds its data (:mod:`.memory`): it is an ordinary strided ATen
TensorImpl with the PrivateUse1 dispatch key on a PrivateUse1 storage whose bytes are host memory
(the C++ allocator's, or on the Python path owned through a DLPack import, :mod:`._dlpack`). Views, strides, storage offsets and aliasing are
therefore ATen's own; view ops run ATen's CPU metadata kernels on the ``neuron`` tensor itself;
a kernel computes on a zero-copy CPU view of the same bytes (:func:`host_view`). There is one
device per NeuronCore of the emulated chip (``neuron:0`` .. ``neuron:N-1``, :mod:`._devices`);
allocations and frees are counted per core against one NeuronCore's HBM capacity.

How ops run (:mod:`.kernels`, :mod:`.dispatch`, :mod:`.host`): a boxed fallback on PrivateUse1
plus a few explicit kernels send every ATen op that reaches the device to ONE entry point,
:func:`trnscope.device.dispatch.execute`, which hands an :class:`DispatchedOp` to the installed
executor. The default executor computes on the host with ATen's CPU kernels (results equal CPU's
bit for bit); the runtime installs its own with :func:`set_executor`.
"""

from __future__ import annotations

from . import registration as _registration

_registration.register()

from . import dispatch, memory  # noqa: E402
from .dispatch import DispatchedOp, OpKind, execute, recording, set_executor  # noqa: E402
from .memory import host_view  # noqa: E402
from .registration import BackendConflictError  # noqa: E402

BACKEND = "neuron"

__all__ = [
    "BACKEND", "BackendConflictError", "DispatchedOp", "OpKind", "dispatch", "execute", "host_view",
    "memory", "recording", "set_executor",
]
