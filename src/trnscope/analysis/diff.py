"""Compare two profiles: operators aligned by name, and the headline figures side by side.

Variants of one workload (naive ops vs a fused op vs a compiled graph) share op names where they
do the same thing and differ where they do not, so ops are matched by name; an op present in only
one profile shows as added or removed. Every delta is ``test - base`` and every ratio
``test / base``, so a ratio below 1 is an improvement for a time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .ops import OpRow
from .summary import ProfileAnalysis

OP_METRICS = ("calls", "cpu_total_ns", "cpu_self_ns", "device_total_ns", "device_self_ns", "dispatches", "bytes")
SUMMARY_METRICS = (
    ("wall_ns", "Wall time (recorded activity)"),
    ("busy_ns", "Device busy (any stream)"),
    ("device_time_ns", "Device time (sum of executions)"),
    ("executions", "Device executions"),
    ("dispatches", "Kernel dispatches"),
    ("programs", "Distinct NEFFs / kernels"),
    ("cpu_self_ns", "Host CPU time (self)"),
    ("busy_share", "Device busy share of its span"),
    ("window_busy_share", "Device busy share of the window"),
    # each profile's MFU is against its kernels' own dtype peaks (an FP32 run is held to FP32's quarter
    # rate), so a run that switched FP32 to BF16 can get faster at a lower MFU: the BF16-peak figure
    # beside it compares the two on one scale
    ("mfu_percent", "MFU % (of each kernel's dtype peak)"),
    ("mfu_bf16_percent", "MFU % of BF16 peak"),
    ("mbu_percent", "MBU %"),
    ("hbm_bytes", "HBM traffic (bytes)"),
    ("idle_ns", "Device idle between executions"),
    ("launch_overhead_share", "Launch-overhead share"),
)


@dataclass
class OpDelta:
    name: str
    status: str  # "both", "added" (only in test), "removed" (only in base)
    base: dict
    test: dict
    delta: dict
    ratio: dict

    def to_dict(self) -> dict:
        return asdict(self)


def _values(row: OpRow | None) -> dict:
    return {m: (getattr(row, m) if row is not None else 0) for m in OP_METRICS}


def _ratio(test, base):
    if base in (None, 0) or test is None:
        return None
    return test / base


def diff_ops(base: ProfileAnalysis, test: ProfileAnalysis) -> list[OpDelta]:
    a, b = base.ops.by_name(), test.ops.by_name()
    out = []
    for name in sorted(set(a) | set(b)):
        va, vb = _values(a.get(name)), _values(b.get(name))
        status = "both" if name in a and name in b else "added" if name in b else "removed"
        out.append(OpDelta(
            name=name, status=status, base=va, test=vb,
            delta={m: vb[m] - va[m] for m in OP_METRICS},
            ratio={m: _ratio(vb[m], va[m]) for m in OP_METRICS},
        ))
    # biggest change in device time first, then host time
    out.sort(key=lambda d: (-abs(d.delta["device_total_ns"]), -abs(d.delta["cpu_total_ns"]), d.name))
    return out


def _summary_values(analysis: ProfileAnalysis) -> dict:
    headline = analysis.headline()
    device, idle = analysis.device, analysis.idle
    return {
        **{k: headline.get(k) for k in ("wall_ns", "busy_ns", "device_time_ns", "executions", "dispatches", "programs",
                                        "cpu_self_ns", "busy_share", "window_busy_share", "mfu_percent",
                                        "mfu_bf16_percent", "mbu_percent")},
        "hbm_bytes": device.hbm_read_bytes + device.hbm_write_bytes,
        "idle_ns": idle.idle_ns,
        "launch_overhead_share": idle.launch_overhead_share if idle.span_ns else None,
    }


def diff_summaries(base: ProfileAnalysis, test: ProfileAnalysis) -> list[dict]:
    va, vb = _summary_values(base), _summary_values(test)
    rows = []
    for key, label in SUMMARY_METRICS:
        a, b = va.get(key), vb.get(key)
        delta = b - a if a is not None and b is not None else None
        rows.append({"key": key, "label": label, "base": a, "test": b, "delta": delta, "ratio": _ratio(b, a)})
    return rows


def diff_kernels(base: ProfileAnalysis, test: ProfileAnalysis) -> list[dict]:
    """NEFFs (kernels) and copies aligned by name: calls and device time side by side. For a
    profile and its ``trnscope retime`` copy this is each NEFF on the two targets."""
    a = {k.name: k for k in base.ops.kernels}
    b = {k.name: k for k in test.ops.kernels}
    out = []
    for name in set(a) | set(b):
        ka, kb = a.get(name), b.get(name)
        ta, tb = (ka.device_total_ns if ka else 0), (kb.device_total_ns if kb else 0)
        out.append({"name": name, "status": "both" if ka and kb else "added" if kb else "removed",
                    "is_copy": bool(ka.is_copy if ka else kb.is_copy if kb else False), "base_calls": ka.calls if ka else 0,
                    "test_calls": kb.calls if kb else 0, "base_device_ns": ta, "test_device_ns": tb,
                    "delta_device_ns": tb - ta, "ratio": _ratio(tb, ta)})
    out.sort(key=lambda k: (-abs(k["delta_device_ns"]), k["name"]))
    return out


def _side(analysis: ProfileAnalysis) -> dict:
    profile = analysis.profile
    retimed = profile.retimed
    return {"name": profile.name, "kind": profile.kind, "regime": analysis.idle.regime, "target": profile.target,
            "host_time": profile.host_time,
            "retimed": {"from_target": (retimed.get("recorded") or {}).get("target"), "target": retimed.get("target"),
                        "overrides": retimed.get("overrides") or []} if retimed else None}


def diff_profiles(base: ProfileAnalysis, test: ProfileAnalysis) -> dict:
    return {
        "base": _side(base),
        "test": _side(test),
        "summary": diff_summaries(base, test),
        "ops": [d.to_dict() for d in diff_ops(base, test)],
        "kernels": diff_kernels(base, test),
    }
