"""The NeuronCore instruction set: access patterns, instructions, Programs and the NEFF container."""

from . import neff
from .ap import AP, Space, dense_dims, hbm, psum, sbuf
from .dtypes import DType
from .errors import DeadlockError, NeffFormatError, ProgramError
from .instructions import (
    COMPUTE_ENGINES, INSTRUCTION_TYPES, Act, Activation, AffineSelect, Alu, BnAggr, BnStats, Dma, DmaGather,
    DmaScatter, Engine, Gather, Instruction, Iota, LoadStationary, Memset, MultiplyMoving, PartitionReduce, Random, Select,
    SemaphoreSet, SemaphoreWait, TensorCopy, TensorReduce, TensorScalar, TensorScan, TensorTensor, TensorTranspose,
)
from .order import execution_order
from .program import Program, QueueDecl, TensorDecl
from .validate import validate

__all__ = [
    "AP", "Act", "Activation", "AffineSelect", "Alu", "BnAggr", "BnStats", "COMPUTE_ENGINES", "DType",
    "DeadlockError", "Dma", "DmaGather", "DmaScatter", "Engine", "Gather", "INSTRUCTION_TYPES", "Instruction", "Iota",
    "LoadStationary", "Memset", "MultiplyMoving", "NeffFormatError", "PartitionReduce", "Program", "ProgramError",
    "QueueDecl", "Random", "Select", "SemaphoreSet", "SemaphoreWait", "Space", "TensorCopy", "TensorDecl", "TensorReduce",
    "TensorScalar", "TensorScan", "TensorTensor", "TensorTranspose", "dense_dims", "execution_order", "hbm", "neff",
    "psum", "sbuf", "validate",
]
