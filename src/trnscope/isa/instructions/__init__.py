"""The instructions the NeuronCore engines execute, at tile level (hardware.md 2.4 and 3.1), one
module per engine. Each class is the one place for its instruction: see :mod:`.base`. A module's
``__all__`` is what this package (and ``trnscope.isa``) exports, so a new instruction is written in its
engine's module only.

The opcodes are the names Neuron's profiler shows (glossary S29): MATMUL, LDWEIGHTS, TENSOR_TENSOR,
ACTIVATE, DMA_DIRECT2D, EVENT_SEMAPHORE, ...
"""

from . import base, dma, gpsimd_engine, scalar_engine, sync_engine, tensor_engine, vector_engine
from .base import *  # noqa: F403
from .dma import *  # noqa: F403
from .gpsimd_engine import *  # noqa: F403
from .scalar_engine import *  # noqa: F403
from .sync_engine import *  # noqa: F403
from .tensor_engine import *  # noqa: F403
from .vector_engine import *  # noqa: F403

__all__: list[str] = []
__all__ += base.__all__
__all__ += dma.__all__
__all__ += gpsimd_engine.__all__
__all__ += scalar_engine.__all__
__all__ += sync_engine.__all__
__all__ += tensor_engine.__all__
__all__ += vector_engine.__all__
