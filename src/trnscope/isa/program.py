"""A Program: everything one NEFF executes on one NeuronCore.

Instructions are kept in one list in program order; each belongs to a stream (an engine, or a
DMA queue), and streams run independently, ordered against each other only by semaphores. The
Program also binds the HBM tensors it reads and writes and names the framework op behind every
instruction.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from .columns import ShapeIndex, gc_paused
from .dtypes import DType
from .instructions import DmaInstruction, Instruction

_setattr = object.__setattr__  # instructions are frozen: add() is where one is completed
# "scalar": a runtime scalar, shape (1,), whose value the runtime writes at submit (compiler.scalars)
TENSOR_KINDS = ("input", "output", "scratch", "const", "scalar")
BOUND_KINDS = ("input", "scalar")  # what a caller binds to run the Program
QUEUE_KINDS = ("input", "output", "data", "instruction", "hardware_dynamic", "software_dynamic")
# A Program spread over the physical cores of a logical NeuronCore (compiler.lnc) says so in its meta:
# LNC_META the number of physical cores, PCORE_META one digit per instruction naming its core.
LNC_META, PCORE_META = "lnc", "pcore"


@dataclass(frozen=True)
class TensorDecl:
    name: str
    shape: tuple[int, ...]
    dtype: DType
    kind: str = "input"

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(frozen=True)
class QueueDecl:
    name: str
    kind: str = "data"


@dataclass
class Program:
    name: str
    target: str = "trn2"
    tensors: list[TensorDecl] = field(default_factory=list)
    queues: list[QueueDecl] = field(default_factory=list)
    semaphores: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)
    constants: dict[int, np.ndarray] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._origin = -1
        self._hash: bytes | None = None
        # the instructions grouped into shapes (isa.columns), made by shape_index() when first needed
        # (once the Program is built: one C-level pass is cheaper than indexing in every add())
        self._index: ShapeIndex | None = None

    def __getstate__(self) -> dict:
        # shape keys hold pattern ids of this process: a copy or an unpickled Program indexes anew
        state = self.__dict__.copy()
        state["_index"] = None
        return state

    # --- building ---------------------------------------------------------------------------------
    def tensor(self, name: str, shape, dtype: DType | str, kind: str = "input",
               value: np.ndarray | None = None) -> int:
        """Bind an HBM tensor; returns its index for HBM access patterns."""
        if kind not in TENSOR_KINDS:
            raise ValueError(f"tensor kind {kind!r} is not one of {TENSOR_KINDS}")
        self.tensors.append(TensorDecl(name, tuple(int(s) for s in shape), DType.parse(dtype), kind))
        idx = len(self.tensors) - 1
        if kind == "const":
            if value is None:
                raise ValueError(f"const tensor {name!r} needs a value")
            self.constants[idx] = np.ascontiguousarray(value, dtype=self.tensors[idx].dtype.np).reshape(
                self.tensors[idx].shape)
        self._hash = None
        return idx

    def queue(self, name: str, kind: str = "data") -> int:
        if kind not in QUEUE_KINDS:
            raise ValueError(f"queue kind {kind!r} is not one of {QUEUE_KINDS}")
        self.queues.append(QueueDecl(name, kind))
        return len(self.queues) - 1

    def semaphore(self, name: str) -> int:
        self.semaphores.append(name)
        return len(self.semaphores) - 1

    def framework_op(self, label: str) -> int:
        """Index of a framework op label (deduplicated)."""
        try:
            return self.ops.index(label)
        except ValueError:
            self.ops.append(label)
            return len(self.ops) - 1

    @contextlib.contextmanager
    def origin(self, label: str) -> Iterator[int]:
        """Instructions added inside come from framework op ``label``."""
        saved = self._origin
        self._origin = self.framework_op(label)
        try:
            yield self._origin
        finally:
            self._origin = saved

    def add(self, instr: Instruction, *, waits: tuple = (), signals: tuple = ()) -> Instruction:
        """Append a new instruction, completing it first: ``waits``/``signals`` are appended to its own
        (what a builder's semaphores add) and an ``op`` of -1 becomes the current :meth:`origin`.
        The shape index is made afterwards, when :meth:`shape_index` is first asked for it.

        Instructions are frozen, and this is the one place that finishes one: pass each instruction
        once (a second add would change an instruction the Program already holds)."""
        if instr.op < 0:
            _setattr(instr, "op", self._origin)
        if waits:
            own = instr.waits
            _setattr(instr, "waits", (*own, *waits) if own else waits)
        if signals:
            own = instr.signals
            _setattr(instr, "signals", (*own, *signals) if own else signals)
        self.instructions.append(instr)
        self._hash = None
        self._index = None
        return instr

    def shape_index(self, identical: bool = False) -> ShapeIndex:
        """The instructions grouped into shapes (``isa.columns.ShapeIndex``): the one made last while it
        still describes ``instructions`` (``identical``: the very same objects, which the NEFF hash
        needs; otherwise equal ones), else a new one for the list as it is now."""
        index = self._index
        if index is None or not index.matches(self.instructions, identical):
            with gc_paused():
                index = self._index = ShapeIndex.build(self.instructions, self.label)
        return index

    # --- views ---------------------------------------------------------------------------------------
    def stream_of(self, instr: Instruction) -> str:
        """Stream key: the engine name, or ``q<N>`` for DMA queue N."""
        if isinstance(instr, DmaInstruction):
            return f"q{instr.queue}"
        return instr.engine.value

    def streams(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, ins in enumerate(self.instructions):
            out.setdefault(self.stream_of(ins), []).append(i)
        return out

    def physical_cores(self) -> tuple[int, np.ndarray | None]:
        """(physical cores the Program runs on, each instruction's core as int8 or None: all on core 0)."""
        n = int(self.meta.get(LNC_META, 1) or 1)
        tags = self.meta.get(PCORE_META)
        if n <= 1 or not tags or len(tags) != len(self.instructions):
            return 1, None
        return n, np.frombuffer(tags.encode("ascii"), np.uint8).astype(np.int8) - 48

    def tensors_of_kind(self, kind: str) -> list[int]:
        return [i for i, t in enumerate(self.tensors) if t.kind == kind]

    def label(self, index: int) -> str:
        """``<ENGINE>:<OPCODE>#<index>`` with its framework op: how errors name an instruction."""
        ins = self.instructions[index]
        origin = f" from {self.ops[ins.op]!r}" if 0 <= ins.op < len(self.ops) else ""
        return f"instruction #{index} {self.stream_of(ins)}:{ins.OPCODE}{origin} in program {self.name!r}"

    # --- identity --------------------------------------------------------------------------------------
    @property
    def content_hash(self) -> bytes:
        """SHA-256 of the serialized body: the same Program gives the same hash in any process."""
        if self._hash is None:
            from .neff import encode_body

            self._hash = hashlib.sha256(encode_body(self)).digest()
        return self._hash

    @property
    def neff_id(self) -> int:
        """The numeric hash NEFF and NTFF file names share (``neff_<id>.neff``)."""
        from ..formats.neff import neff_id

        return neff_id(self.content_hash)

    def __len__(self) -> int:
        return len(self.instructions)
