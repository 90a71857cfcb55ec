"""JSON documents for the explorer's summary, card, operator and compare endpoints.

The analysis layer works on absolute trace times; the browser works on times relative to the
system view's origin and on lane ids. This module does that translation and adds the names the
pages show (lane titles, the op behind a gap), so the analysis objects stay free of UI concerns.
"""

from __future__ import annotations

from ..analysis import diff_profiles
from ..analysis.kernel_names import short_kernel_name
from .sessions import Session


def card(session: Session) -> dict:
    analysis = session.analysis
    return {
        "id": session.entry.id,
        "name": session.entry.display_name,
        "kind": session.profile.kind,
        "headline": analysis.headline(),
        "recommendations": [{"severity": r.severity, "title": r.title} for r in analysis.recommendations],
        "warnings": analysis.warnings()[:5],
        "from_cache": session.profile.from_cache,
    }


MEMORY_POINTS = 400  # per device, for the summary's memory chart


def summary(session: Session) -> dict:
    analysis = session.analysis
    view = session.system
    out = analysis.to_dict()
    out["memory"] = analysis.memory.to_dict(points=MEMORY_POINTS)
    for device in out["memory"]["devices"]:
        device["points"] = [[t - view.origin, v] for t, v in device["points"]]
        if device["peak_ns"] is not None:
            device["peak_ts"] = device.pop("peak_ns") - view.origin
    out["id"] = session.entry.id
    out["name"] = session.entry.display_name
    out["kind"] = session.profile.kind
    for gap in out["idle"]["largest"]:
        gap["ts"] = gap.pop("start_ns") - view.origin
        gap["end"] = gap.pop("end_ns") - view.origin
        gap["lane"] = f"t{gap['track']}"
        gap["lane_title"] = view.lane_title(gap["track"])
        gap["before"] = view.slice_summary(gap["before_row"])["name"]
        gap["after"] = short_kernel_name(view.slice_summary(gap["after_row"])["name"])
        gap["after_op"] = analysis.launching_op(gap["after_row"])
    for step in out["steps"]:
        step["ts"] = step.pop("start_ns") - view.origin
    out["manifest"] = session.entry.manifest
    return out


def ops(session: Session) -> dict:
    table = session.analysis.ops.to_dict()
    view = session.system
    device = {n.neff_id: n for n in session.analysis.device.neffs}
    for row in table["ops"]:
        row["neffs"] = [_neff_ref(device[p]) for p in row["programs"] if p in device]
    for kernel in table["kernels"]:
        neff = device.get(kernel["program"])
        kernel["ntff"] = neff.ntff if neff else {}
        kernel["first_ts"] = view.slice_summary(kernel["first_row"])["ts"] if kernel["first_row"] >= 0 else None
    for row in table["ops"]:
        row["first_ts"] = view.slice_summary(row["first_row"])["ts"] if row["first_row"] >= 0 else None
    table["kind"] = session.profile.kind
    table["name"] = session.entry.display_name
    return table


def _neff_ref(neff) -> dict:
    return {"neff_id": neff.neff_id, "name": neff.name, "executions": neff.executions,
            "device_time_ns": neff.device_time_ns, "ntff": neff.ntff, "bottleneck": neff.bottleneck,
            "mbu_percent": neff.mbu_percent, "mfu_percent": neff.mfu_percent}


def compare(base: Session, test: Session) -> dict:
    out = diff_profiles(base.analysis, test.analysis)
    out["base"]["id"] = base.entry.id
    out["test"]["id"] = test.entry.id
    out["base"]["name"] = base.entry.display_name
    out["test"]["name"] = test.entry.display_name
    out["base"]["recommendations"] = [r.title for r in base.analysis.recommendations]
    out["test"]["recommendations"] = [r.title for r in test.analysis.recommendations]
    return out

