"""``trnscope summary``, ``trnscope diff`` and ``trnscope export``: the analysis library in the
terminal (rich tables that fit the terminal, or ``--json``) and one Chrome JSON with every lane for
Perfetto. None of them imports torch; each imports what it needs when it runs.

Names from a trace (op and kernel names such as ``[param|cuda]``) are printed as text, never as
rich markup.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .. import hosttime
from .format import count, duration, human_bytes, percent, ratio, signed
from .tables import grid as _grid

if TYPE_CHECKING:
    from rich.console import Console

# columns of the operator table, with the narrowest terminal each needs to be shown
_OP_COLUMNS = (("calls", 0), ("CPU self", 100), ("CPU total", 0), ("device self", 0), ("device total", 0),
               ("dispatches", 90))


def _load_analysis(path: Path):
    """The analysis of one profile or trace; raises ProfileError for what cannot be opened."""
    from ..analysis import ProfileAnalysis, load_profile

    return ProfileAnalysis(load_profile(path))


def _load(path: Path):
    from ..analysis import ProfileError

    try:
        return _load_analysis(path)
    except ProfileError as exc:
        raise ValueError(str(exc)) from None


def _rule(name: str):
    from rich.rule import Rule
    from rich.text import Text

    return Rule(Text(str(name)), style="dim")


def _targets(path: Path) -> tuple[list[tuple[str | None, Path]], bool]:
    """What to summarise: ([(name, path)], whether a folder was searched). The profile or trace
    itself, or every profile and trace under a folder, named as the explorer names them."""
    from ..analysis.profile import detect_kind

    if not path.exists():
        raise ValueError(f"{path}: no such profile or trace")
    if path.is_file() or detect_kind(path) is not None:
        return [(None, path)], False
    from ..explorer.catalog import Catalog

    entries = Catalog([path]).entries()
    if not entries:
        raise ValueError(f"{path}: no profiles or traces in this folder. Pass a trnscope profile directory, a "
                         f"folder holding profiles (such as the one `trnscope demo` writes), or a torch.profiler "
                         f"trace (.json / .json.gz)")
    return [(e.display_name, e.path) for e in entries], True


def _write_json(data) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
                                  | orjson.OPT_NON_STR_KEYS, default=str).decode())
    sys.stdout.write("\n")


def _text(value):
    from rich.text import Text

    return Text(str(value))


class SummaryCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", type=Path,
                            help="a profile directory, a folder of profiles (each is summarised) or a trace file")
        parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
        parser.add_argument("--top", type=int, default=12, help="operators to list (default 12)")
        parser.add_argument("--wide", action="store_true", help="full names, whatever the terminal's width")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        from ..analysis import ProfileError
        from ..analysis.ranks import is_run

        if is_run(args.profile):  # a multi-rank run folder: one report over every rank
            from .ranks_cmd import summarise_run

            return summarise_run(args.profile, console, args.json, args.top, args.wide)
        targets, searched = _targets(args.profile)
        failed = 0
        if args.json:
            out = []
            for name, path in targets:
                try:
                    a = _load_analysis(path)
                except ProfileError as exc:
                    if not searched:
                        raise ValueError(str(exc)) from None
                    failed += 1  # one unreadable profile among many: listed with its reason
                    out.append({"name": name, "path": str(path), "complete": False, "error": str(exc),
                                "problems": getattr(exc, "problems", [exc.problem])})
                    continue
                data = a.to_dict()
                data["name"] = name or a.profile.name
                data["path"] = str(path)
                data["complete"] = a.profile.files.complete if a.profile.files is not None else True
                data["ops"] = [vars(o) for o in a.ops.ops[: args.top]]
                data["roofline"] = a.roofline.to_dict()
                data["source_lines"] = a.source_lines.to_dict()
                out.append(data)
            _write_json(out if searched else out[0])
            return 1 if failed else 0
        if searched:
            console.print(_text(f"{len(targets)} profile(s) under {args.profile}"), highlight=False)
        for name, path in targets:
            try:
                a = _load_analysis(path)
            except ProfileError as exc:
                if not searched:
                    raise ValueError(str(exc)) from None
                failed += 1
                console.print(_rule(name or path.name))
                console.print(_text(f"not summarised: {exc}"), style="bold red", highlight=False)
                continue
            _print_summary(console, name or a.profile.name, a, args.top, args.wide)
        return 1 if failed else 0


def _print_summary(console: Console, name: str, a, top: int, wide: bool) -> None:
    from rich.rule import Rule
    from rich.text import Text

    h = a.headline()
    idle = a.idle
    console.print(Rule(Text(f"{name} ({a.profile.kind} · {h['device_label']})"), style="dim"))
    files = a.profile.files
    if files is not None and not files.complete:
        # before any figure: they describe only what was written before the export stopped
        console.print(Text(f"INCOMPLETE profile: {'; '.join(files.problems())}", style="bold red"), highlight=False)
    line = (f"Window {duration(h['wall_ns'])}; device busy {duration(idle.busy_ns)} in {count(h['executions'])} "
            f"executions ({count(h['dispatches'])} kernel dispatches, {count(h['programs'])} distinct "
            f"{'NEFFs' if h['device_kind'] == 'neuron' else 'kernels'}); regime: {h['regime']}")
    console.print(Text(line), highlight=False)
    if a.profile.kind == "neuron":
        console.print(Text(f"target {h.get('target') or 'unknown'}; host time {hosttime.describe(h.get('host_time'))}"),
                      highlight=False)
    figures = []
    if h.get("mfu_percent") is not None:
        # which peak the MFU is a share of (each kernel's dtype peak: FP32 runs at a quarter of BF16's)
        figures.append(f"{a.device.mfu_text()}  MBU {h['mbu_percent'] or 0:.1f}%")
    moved = a.device.hbm_read_bytes + a.device.hbm_write_bytes
    if moved:
        figures.append(f"HBM traffic {human_bytes(moved)}")
    if a.memory.devices:
        figures.append("peak memory " + ", ".join(f"{s.device} {human_bytes(s.peak_bytes)}" for s in a.memory.devices))
    if figures:
        console.print(Text("; ".join(figures)), highlight=False)
    for warning in a.warnings():
        console.print(Text(f"warning: {warning}", style="yellow"), highlight=False)
    if a.utilization.devices:
        _print_utilization(console, a, wide)
    _print_ops(console, a, top, wide)
    if a.kernel_limits:
        _print_limits(console, a, wide)
    if a.steps:
        _print_steps(console, a, wide)
    if a.roofline.neffs:
        _print_roofline(console, a, top, wide)
    if any(r.origin for r in a.source_lines.rows):
        _print_source_lines(console, a, top, wide)
    if idle.largest:
        _print_gaps(console, a, wide)
    _print_recommendations(console, a)


def _print_utilization(console: Console, a, wide: bool) -> None:
    from rich.text import Text

    idle = a.idle
    rows = []
    for d in a.utilization.devices:
        rows.append([d.device, duration(d.span_ns), percent(d.share(d.busy_ns)), percent(d.share(d.idle_ns)),
                     percent(d.share(d.compute_ns)), percent(d.share(d.non_compute_ns)), percent(d.comm_comp_overlap)])
        for st in sorted(d.streams, key=lambda st: -st.busy_ns)[:8]:
            rows.append([f"  {st.name.strip()}", duration(st.span_ns),
                         percent(st.busy_ns / st.span_ns if st.span_ns else 0), "", "", "", ""])
        if len(d.streams) > 8:
            rows.append([f"  ... {len(d.streams) - 8} more streams", "", "", "", "", "", ""])
    _grid(console, "Device use (busy: any stream running, as HTA's temporal breakdown)",
          [("device / stream", "left"), ("span", "right"), ("busy", "right"), ("idle", "right"),
           ("compute", "right"), ("non-compute", "right"), ("comm/comp overlap", "right")], rows, wide)
    shares = idle.to_dict()["window_shares"]
    parts = [("busy", "busy"), ("host_dispatch", "waiting for host dispatch"),
             ("outside", "before/after device work"), ("launch_latency", "launch latency"),
             ("dependency", "waiting on dependencies"), ("unknown", "cause unknown")]
    text = ", ".join(f"{label} {percent(shares[key])}" for key, label in parts if shares[key] or key == "busy")
    per = " per device" if idle.devices > 1 else ""
    console.print(Text(f"Where the profile's {duration(idle.window_ns // max(1, idle.devices))} went{per}: {text}"),
                  highlight=False)
    for d in a.utilization.devices:
        kinds = d.kernel_type_shares()
        if len(kinds) > 1 or (kinds and next(iter(kinds)) != "computation"):
            console.print(Text(f"Kernel types on {d.device}: " + ", ".join(f"{k} {percent(v)}" for k, v in kinds.items())),
                          highlight=False)


def _print_ops(console: Console, a, top: int, wide: bool) -> None:
    width = console.width
    columns = [(c, w) for c, w in _OP_COLUMNS if wide or width >= w]
    values = {
        "calls": lambda o: count(o.calls), "CPU self": lambda o: duration(o.cpu_self_ns),
        "CPU total": lambda o: duration(o.cpu_total_ns), "device self": lambda o: duration(o.device_self_ns),
        "device total": lambda o: duration(o.device_total_ns), "dispatches": lambda o: count(o.dispatches),
    }
    rows = [[o.name, *(values[c](o) for c, _ in columns)] for o in a.ops.ops[:top]]
    _grid(console, f"Operators (top {min(top, len(a.ops.ops))} of {count(len(a.ops.ops))}, by device self time)",
          [("operator", "left")] + [(c, "right") for c, _ in columns], rows, wide)


def _print_limits(console: Console, a, wide: bool) -> None:
    total = max(1, a.device.kernel_time_ns)
    rows = []
    for k in a.kernel_limits:
        label = f"{', '.join(k.ops)} ({k.name})" if k.ops else k.name
        if k.auto_cast and k.auto_cast != "none":
            label += f" [auto-cast {k.auto_cast}]"
        position = k.position or "-"
        rows.append([label, f"{duration(k.device_time_ns)} ({percent(k.device_time_ns / total, 0)})",
                     percent((k.mfu_percent or 0) / 100), _peak_cell(k.peak_dtype, k.peak_flops_per_s),
                     percent((k.mbu_percent or 0) / 100), position, _limiter_cell(k)])
    _grid(console, "Costliest NEFFs: roofline position and limiter (MFU of TensorE's peak for the dtype the kernel "
          "streamed)", [("op (NEFF)", "left"), ("device time", "right"), ("MFU", "right"), ("of peak", "left"),
                        ("MBU", "right"), ("roofline", "left"), ("limiter", "left")], rows, wide)


def _limiter_cell(k) -> str:
    """The limiter; TensorE at a rate other than BF16's says which (``TensorE compute at FP32 rate``)."""
    limiter = k.limiter.replace(" (partly)", "")
    if limiter.startswith("TensorE compute") and k.peak_dtype and not k.peak_dtype.startswith(("BF16", "mixed")):
        return f"{limiter} at {k.peak_dtype} rate"
    return limiter


def _peak_cell(label: str, flops_per_s: float) -> str:
    """``FP32 39.3T`` (TFLOP/s); a mix by its name only; "-" without TensorE FLOPs."""
    if not label:
        return "-"
    name = "mixed" if label.startswith("mixed") else label.replace(" (assumed)", "?")
    return f"{name} {flops_per_s / 1e12:.1f}T" if flops_per_s else name


def _print_steps(console: Console, a, wide: bool, shown: int = 20) -> None:
    rows = []
    for st in a.steps[:shown]:
        share = lambda ns, st=st: percent(ns / st.dur_ns if st.dur_ns else 0, 0)  # noqa: E731
        rows.append([st.name, duration(st.dur_ns), count(st.executions), f"{duration(st.busy_ns)} ({share(st.busy_ns)})",
                     f"{duration(st.host_dispatch_ns)} ({share(st.host_dispatch_ns)})",
                     f"{duration(st.launch_ns)} ({share(st.launch_ns)})", f"{duration(st.idle_ns)} ({share(st.idle_ns)})"])
    more = f" (first {shown} of {len(a.steps)})" if len(a.steps) > shown else ""
    _grid(console, f"Per-step overview{more}", [("step", "left"), ("duration", "right"), ("executions", "right"),
          ("device busy", "right"), ("host dispatch", "right"), ("launch", "right"), ("idle", "right")], rows, wide)


def _print_roofline(console: Console, a, top: int, wide: bool) -> None:
    r = a.roofline
    peaks = ", ".join(f"{d} {f / 1e12:.1f} TFLOP/s (ridge {f / r.hbm_bytes_per_s:.0f} FLOP/B)"
                      for d, f in r.peaks().items())
    title = (f"Roofline ({r.target or 'target unknown'}: peak {peaks}; HBM {r.hbm_bytes_per_s / 1e9:.0f} GB/s per "
             f"NeuronCore; each point under its dtype's peak)")
    columns = [("NEFF / op", "left"), ("calls", "right"), ("time", "right"), ("FLOP/B", "right"),
               ("attained", "right"), ("peak", "left"), ("of roof", "right"), ("HBM", "right"), ("bound", "left")]
    for label, points in (("per NEFF", r.neffs), ("per op", r.ops)):
        rows = []
        for p in points[:top]:
            flops = p.flops > 0
            rows.append([p.name, count(p.executions), duration(p.time_ns), f"{p.intensity:.1f}" if flops else "-",
                         f"{p.flops_per_s / 1e12:.2f} TFLOP/s" if flops else "-",
                         _peak_cell(p.peak_dtype, p.peak_flops_per_s) if flops else "-",
                         percent(p.of_roof, 1) if p.of_roof is not None else "-",
                         f"{p.bytes_per_s / 1e9:.0f} GB/s ({percent(p.bandwidth_share, 0)})", p.bound])
        _grid(console, f"{title}, {label}" if label == "per NEFF" else f"Roofline, {label}", columns, rows, wide)


def _print_source_lines(console: Console, a, top: int, wide: bool) -> None:
    t = a.source_lines
    rows = []
    for r in t.rows[:top]:
        ops = ", ".join(o["op"] for o in r.ops[:3]) + (f" +{len(r.ops) - 3}" if len(r.ops) > 3 else "")
        rows.append([r.line, "backward" if r.backward else "forward", r.origin or "-", duration(r.device_ns),
                     percent(r.share, 1), count(r.executions), ops, ", ".join(r.callers)])
    more = f", first {top} of {len(t.rows)}" if len(t.rows) > top else ""
    found = "" if t.recorded else " (lines of Python frames name the function; record with with_stack=True for lines)"
    _grid(console, f"Device time by source line ({count(t.with_line)} of {count(t.executions)} executions{more}){found}",
          [("source line", "left"), ("pass", "left"), ("found from", "left"), ("device", "right"), ("share", "right"),
           ("executions", "right"), ("ops", "left"), ("called from", "left")], rows, wide)


def _print_gaps(console: Console, a, wide: bool, shown: int = 5) -> None:
    from ..analysis.kernel_names import short_kernel_name

    trace = a.profile.trace
    start = trace.start_ns
    rows = []
    for g in a.idle.largest[:shown]:
        after = trace.strings[int(trace.slices.name[g.after_row])]
        rows.append([f"+{duration(g.start_ns - start)}", duration(g.duration_ns), g.cause.replace("_", " "),
                     short_kernel_name(after), a.launching_op(g.after_row) or "-"])
    _grid(console, f"Largest idle gaps ({count(a.idle.gap_count)} in all; at = time since the trace's start)",
          [("at", "right"), ("idle", "right"), ("cause", "left"), ("next execution", "left"), ("launched by", "left")],
          rows, wide, names=(3, 4))


def _print_recommendations(console: Console, a) -> None:
    from rich.padding import Padding
    from rich.text import Text

    if not a.recommendations:
        console.print(Text("No findings: nothing in this profile crossed a rule's threshold (docs/analysis.md).",
                           style="dim"), highlight=False)
        return
    console.print(Text("Recommendations", style="bold"))
    for i, r in enumerate(a.recommendations, 1):
        line = Text(f"{i}. ")
        line.append(r.severity, style={"high": "bold red", "medium": "yellow", "low": "cyan"}.get(r.severity, ""))
        line.append(f": {r.title}.", style="bold")
        console.print(line, highlight=False)
        console.print(Padding(Text(r.detail), (0, 0, 0, 3), expand=False), highlight=False)
        console.print(Padding(Text(f"evidence: {_evidence(r.evidence)}", style="dim"), (0, 0, 0, 3), expand=False),
                      highlight=False)


def _evidence(evidence: dict, limit: int = 240) -> str:
    """``key=value`` pairs, numbers readable, nested figures flattened; cut at ``limit`` characters."""
    def value(key: str, v) -> str:
        if isinstance(v, bool) or v is None:
            return str(v)
        if isinstance(v, float):
            if key.endswith("_ns"):
                return duration(v)
            return f"{v:.3g}" if abs(v) < 1 else f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        if isinstance(v, int):
            return duration(v) if key.endswith("_ns") else human_bytes(v) if key.endswith("bytes") else count(v)
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {value(str(k), x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + "; ".join(value(key, x) for x in v) + "]"
        return str(v)

    text = ", ".join(f"{k}={value(k, v)}" for k, v in evidence.items())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DiffCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("base", type=Path)
        parser.add_argument("test", type=Path)
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--top", type=int, default=15)
        parser.add_argument("--wide", action="store_true", help="full names, whatever the terminal's width")

    def run(self, args: argparse.Namespace, console: Console) -> int:

        from ..analysis import diff_profiles

        for path in (args.base, args.test):
            if not path.exists():
                raise ValueError(f"{path}: no such profile or trace")
        d = diff_profiles(_load(args.base), _load(args.test))
        if args.json:
            _write_json(d)
            return 0
        rows = [[row["label"], _metric_format(row["key"])(row["base"]), _metric_format(row["key"])(row["test"]),
                 _delta(row["key"], row["delta"]), ratio(row["ratio"])] for row in d["summary"]]
        _grid(console, f"{_side(d['base'])} -> {_side(d['test'])}",
              [("metric", "left"), ("base", "right"), ("test", "right"), ("delta", "right"), ("ratio", "right")],
              rows, args.wide)
        rows = [[op["name"], op["status"], duration(op["base"]["device_total_ns"]), duration(op["test"]["device_total_ns"]),
                 signed(op["delta"]["device_total_ns"], duration), signed(op["delta"]["calls"], count),
                 signed(op["delta"]["dispatches"], count)] for op in d["ops"][: args.top]]
        _grid(console, "Operators (largest device-time change first)",
              [("operator", "left"), ("in", "left"), ("base device", "right"), ("test device", "right"),
               ("delta device", "right"), ("delta calls", "right"), ("delta dispatches", "right")], rows, args.wide)
        rows = [[k["name"], k["status"], count(k["base_calls"]), count(k["test_calls"]), duration(k["base_device_ns"]),
                 duration(k["test_device_ns"]), signed(k["delta_device_ns"], duration), ratio(k["ratio"])]
                for k in d["kernels"][: args.top]]
        _grid(console, "NEFFs and copies (largest device-time change first)",
              [("NEFF / copy", "left"), ("in", "left"), ("base calls", "right"), ("test calls", "right"),
               ("base device", "right"), ("test device", "right"), ("delta device", "right"), ("ratio", "right")],
              rows, args.wide)
        return 0


def _side(side: dict) -> str:
    """A profile's name with its target, and what it was re-timed from."""
    notes = [side["target"]] if side.get("target") else []
    retimed = side.get("retimed")
    if retimed:
        notes.append(f"retimed from {retimed.get('from_target') or '?'}"
                     + (f" with {', '.join(retimed['overrides'])}" if retimed.get("overrides") else ""))
    return f"{side['name']} ({'; '.join(notes)})" if notes else side["name"]


def _metric_format(key: str):
    if key.endswith("_ns"):
        return duration
    if key.endswith("_bytes") or key == "hbm_bytes":
        return human_bytes
    if key.endswith("_share"):
        return percent
    if key.endswith("_percent"):
        return lambda v: percent(None if v is None else v / 100)
    return count


def _delta(key: str, value) -> str:
    if value is None:
        return "-"
    if key.endswith("_share"):
        return signed(value * 100, lambda v: f"{v:.1f} pp")
    if key.endswith("_percent"):
        return signed(value, lambda v: f"{v:.1f} pp")
    return signed(value, _metric_format(key))


class ExportCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", type=Path)
        parser.add_argument("-o", "--output", type=Path, help="output file (default: <profile>/combined.json.gz)")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        from ..analysis import ProfileError, load_profile
        from ..trace import write_kineto

        if not args.profile.exists():
            raise ValueError(f"{args.profile}: no such profile or trace")
        try:
            profile = load_profile(args.profile)
        except ProfileError as exc:
            raise ValueError(str(exc)) from None
        out = args.output or (args.profile / "combined.json.gz" if args.profile.is_dir()
                              else args.profile.with_suffix(".combined.json.gz"))
        write_kineto(profile.trace, out)
        console.print(f"wrote {out} ({count(len(profile.trace.slices))} slices, {count(len(profile.trace.flows))} flows)",
                      markup=False, highlight=False)
        return 0
