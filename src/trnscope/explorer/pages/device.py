"""Device trace (``#/p/<id>/device/<neff>/<nc>``): one NEFF on one NeuronCore, instruction by
instruction; reached from executions, the operator table, the summary and the roofline."""

from __future__ import annotations

from . import Page

PAGE = Page(name="device", title="Device trace", script="views/device.js", order=90, params=("neff", "nc"),
            nav=False, nav_title="Device trace · NC {nc}", kinds=("neuron",),
            timeline="/device/{neff}/{nc:int}",
            view=lambda session, params: session.device(params["neff"], params["nc"]))
