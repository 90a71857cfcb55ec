"""The host-time modes, as written into profiles and read back (torch-free: the viewer side uses it).

``real``: the user's Python and PyTorch's dispatcher as measured on this machine, with the
emulator's own work cut out and the Neuron backend's host costs from trnscope's host-cost model.
``modelled``: every host interval from the model, so a script gives the same profile on any
machine and under any load. ``mixed``: the mode changed while the profile recorded.
"""

from __future__ import annotations

REAL = "real"
MODELLED = "modelled"
MIXED = "mixed"
MODES = (REAL, MODELLED)
ENV = "TRNSCOPE_HOST_TIME"

NOTES = {
    REAL: "host times: your Python and PyTorch's dispatcher as measured on this machine, the Neuron backend's "
          "host costs from trnscope's host-cost model, emulator work cut out; device times simulated; one axis",
    MODELLED: "host times: every interval from trnscope's host-cost model (reproducible on any machine); device "
              "times simulated; one axis",
    MIXED: "host times: the host-time mode changed during the recording (partly measured, partly modelled); "
           "device times simulated; one axis",
}

SHORT = {REAL: "real (measured host, modelled backend)", MODELLED: "modelled (reproducible)",
         MIXED: "mixed (mode changed while recording)"}


def describe(mode: str | None) -> str:
    """One line for a profile's host-time mode (``unknown`` for profiles written before modes)."""
    return SHORT.get(mode or "", "unknown (written before host-time modes)")
