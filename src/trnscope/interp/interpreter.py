"""Execute a Program's instructions on NumPy, one at a time, in ``execution_order``.

What each instruction computes is registered for its class in :mod:`.semantics`; the numeric rules (FP32 compute,
casts, integer ops) live in :mod:`.numerics`, the memories and access-pattern views in
:mod:`.memory`. Errors raised while executing an instruction are :class:`ProgramError` naming it
(``program.label(i)``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..isa import AP, Program, ProgramError, execution_order, validate
from ..isa.program import BOUND_KINDS
from . import numerics as nm
from .memory import Memory
from .semantics import SEMANTICS


class Interpreter:
    """The state of one NeuronCore running one Program: memories plus TensorE's stationary operand.

    ``run()`` does everything; ``load()`` + ``step()`` let a caller (a debugger, a test) execute
    instruction by instruction and inspect ``memory`` in between.
    """

    def __init__(self, program: Program, spec=None, *, poison: bool = True) -> None:
        from ..hw import get_spec, resolve

        self.program = program
        # a program runs on the target it was built for unless told otherwise
        self.spec = resolve(spec) if spec is not None else (resolve(program.target) if program.target else get_spec())
        self.memory = Memory(program, self.spec, poison=poison)
        self.stationary: np.ndarray | None = None  # FP32 weights held by LDWEIGHTS, as stationary.T [M, K]
        self.executed = 0
        # a Program spread over a logical core's physical cores (LNC=2): each core has its own SBUF,
        # PSUM and TensorE weights; HBM is shared. ``memory``/``stationary`` are the current core's.
        self._poison = poison
        self._pcore = program.physical_cores()[1]
        self._core = 0
        self._cores: dict[int, tuple[Memory, np.ndarray | None]] = {}

    # --- inputs and outputs --------------------------------------------------------------------------
    def load(self, inputs: Mapping[str, object] | Sequence[object] | None) -> None:
        """Bind input tensors and runtime scalars (by name, or positionally in the order the program
        declares them) and consts."""
        prog = self.program
        input_ids = [i for i, t in enumerate(prog.tensors) if t.kind in BOUND_KINDS]
        if inputs is None:
            inputs = {}
        if isinstance(inputs, Mapping):
            by_name = {prog.tensors[i].name: i for i in input_ids}
            unknown = [k for k in inputs if k not in by_name]
            if unknown:
                raise ValueError(f"program {prog.name!r} has no input tensor named {', '.join(map(repr, unknown))} "
                                 f"(inputs: {', '.join(by_name) or 'none'})")
            missing = [k for k in by_name if k not in inputs]
            if missing:
                raise ValueError(f"program {prog.name!r} needs input {', '.join(map(repr, missing))}")
            for name, value in inputs.items():
                self.memory.load_tensor(by_name[name], value)
        else:
            values = list(inputs)
            if len(values) != len(input_ids):
                raise ValueError(f"program {prog.name!r} takes {len(input_ids)} inputs "
                                 f"({', '.join(prog.tensors[i].name for i in input_ids)}), got {len(values)}")
            for idx, value in zip(input_ids, values):
                self.memory.load_tensor(idx, value)
        for idx in prog.tensors_of_kind("const"):
            if idx not in prog.constants:
                raise ValueError(f"const tensor {prog.tensors[idx].name!r} has no value in program.constants")
            self.memory.load_tensor(idx, prog.constants[idx])

    def outputs(self) -> dict[str, np.ndarray]:
        return {self.program.tensors[i].name: self.memory.tensor(i) for i in self.program.tensors_of_kind("output")}

    # --- execution -----------------------------------------------------------------------------------
    def step(self, index: int) -> None:
        """Execute instruction ``index`` of the program."""
        ins = self.program.instructions[index]
        if self._pcore is not None and self._pcore[index] != self._core:
            self._enter_core(int(self._pcore[index]))
        handler = SEMANTICS.get(type(ins))
        try:
            if handler is None:
                raise ProgramError(f"the interpreter has no semantics for {type(ins).__name__}")
            with np.errstate(all="ignore"):  # the hardware makes inf/NaN silently
                handler(self, ins)
        except ProgramError as exc:
            raise ProgramError(f"{self.program.label(index)}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - any failure is reported against the instruction
            raise ProgramError(f"{self.program.label(index)}: could not execute: {type(exc).__name__}: {exc}") from exc
        self.executed += 1

    def _enter_core(self, core: int) -> None:
        """Make physical core ``core``'s SBUF, PSUM and weights current (its memory shares HBM)."""
        self._cores[self._core] = (self.memory, self.stationary)
        if core not in self._cores:
            hbm_of = self._cores[0][0]
            mem = Memory(self.program, self.spec, poison=self._poison)
            mem.hbm, mem.decls = hbm_of.hbm, hbm_of.decls
            self._cores[core] = (mem, None)
        self.memory, self.stationary = self._cores[core]
        self._core = core

    def run(self, inputs=None, *, check: bool = True) -> dict[str, np.ndarray]:
        if check:
            validate(self.program, self.spec)
        self.load(inputs)
        for i in execution_order(self.program):
            self.step(i)
        return self.outputs()

    # --- operand helpers -----------------------------------------------------------------------------
    def read(self, ap: AP) -> np.ndarray:
        return self.memory.read(ap)

    def write(self, ap: AP, values: np.ndarray | np.generic) -> None:
        self.memory.write(ap, nm.cast(values, ap.dtype.np))

    def scalar(self, s, partitions: int) -> np.ndarray:
        """An immediate, or a per-partition [P, 1] vector, shaped to broadcast against [P, F]."""
        if isinstance(s, AP):
            if s.partitions != partitions or s.free_size != 1:
                raise ProgramError(f"per-partition operand must be [{partitions}, 1], got {list(s.shape)}")
            return self.read(s)
        if s is None:
            raise ProgramError("a scalar operand is missing")
        return nm.immediate(s)

    @staticmethod
    def same_size(a: AP, b: AP, what: str) -> None:
        if a.partitions != b.partitions or a.free_size != b.free_size:
            raise ProgramError(f"{what}: shape mismatch {list(a.shape)} -> {list(b.shape)}")


def run(program: Program, inputs: Mapping[str, object] | Sequence[object] | None = None, *, spec=None,
        check: bool = True, poison: bool = True) -> dict[str, np.ndarray]:
    """Execute ``program`` and return its output tensors by name.

    ``inputs``: arrays by tensor name, or in the order of the program's input tensors (NumPy arrays,
    or CPU torch tensors; values are converted to each tensor's dtype, shapes must match).
    ``spec``: a HardwareSpec or target name (default: the program's target).
    ``check``: run :func:`trnscope.isa.validate` first (a :class:`ProgramError` names the instruction).
    ``poison``: start SBUF/PSUM as 0xFF bytes (NaN in float dtypes) and HBM scratch/output tensors as
    NaN, so reading what nobody wrote is visible; ``False`` starts everything at zero.
    """
    return Interpreter(program, spec, poison=poison).run(inputs, check=check)
