"""NKI (Neuron Kernel Interface) kernels on the emulated NeuronCore.

``trnscope.nki`` is a drop-in for the current NKI (0.6/0.7): ``import nki``, ``import nki.language as
nl``, ``import nki.isa as nisa`` resolve to it under ``trnscope run`` (and after
:func:`trnscope.nki.install_aliases`). ``@nki.jit`` traces the kernel's Python once per argument
signature into a trnscope Program - the instructions the engines run, with semaphores, SBUF/PSUM
placement and each instruction's kernel source line - so the interpreter computes its results and
the simulator says how long every instruction takes. See docs/nki.md.
"""

from __future__ import annotations

from . import isa, language
from .errors import (NkiAllocationError, NkiError, NkiLegacyError, NkiUninitializedError, NkiUnsupportedError,
                     NkiValidationError)
from .jit import ArgSpec, Kernel, Traced, jit, simulate, target_spec
from .report import RunReport
from .tensor import NkiTensor

__version__ = "0.6.0+trnscope"


def _removed(name: str, what: str):
    def fn(*args, **kwargs):
        raise NkiLegacyError(f"nki.{name} is not available in nki.* (removed in NKI 0.2; it was "
                             f"neuronxcc.nki.{name}). {what}")
    fn.__name__ = name
    return fn


_PROFILE_HINT = ("With trnscope, every call already has its simulated timing in kernel.last_run; "
                 "kernel.last_run.save_profile(DIR) writes a NEFF/NTFF profile for `trnscope view`, and "
                 "`trnscope run --profile DIR script.py` profiles a whole script.")
benchmark = _removed("benchmark", _PROFILE_HINT)
profile = _removed("profile", _PROFILE_HINT)
baremetal = _removed("baremetal", "Call the @nki.jit kernel with NumPy arrays instead.")
simulate_kernel = _removed("simulate_kernel", "Use nki.simulate(kernel)(*arrays).")


def install_aliases() -> None:
    """Make ``nki``, ``nki.language``, ``nki.isa`` and ``neuronxcc.nki`` import trnscope's for this process."""
    from .aliases import install

    install()


__all__ = ["ArgSpec", "Kernel", "NkiAllocationError", "NkiError", "NkiLegacyError", "NkiTensor",
           "NkiUninitializedError", "NkiUnsupportedError", "NkiValidationError", "RunReport", "Traced", "benchmark",
           "baremetal", "install_aliases", "isa", "jit", "language", "profile", "simulate", "simulate_kernel",
           "target_spec"]
