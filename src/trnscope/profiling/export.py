"""``NeuronProfiler``: writes one profile directory per recording window.

``NeuronProfiler(cfg).export_trace`` is the ``on_trace_ready`` handler (it may also be called by
hand after a ``with profile(...)`` block). Each call writes

    <profile_output_dir>/<hostname>_pid_<pid>/<YYYYmmdd_HHMMSS_ffffff>/
        trace.json                       framework trace (Kineto-compatible, device lanes)   always
        system_trace.json                runtime + hardware lanes, flows, HBM usage           RUNTIME
        neff_<id>.neff                   every NEFF executed in the window                    DEVICE
        <id>_instid_0_vnc_<nc>.ntff      its instruction trace on NeuronCore <nc>             DEVICE
        cpu_util.json                    host CPU utilisation samples                         CPU_UTIL
        host_mem.json                    host memory samples                                  HOST_MEMORY
        manifest.json                    every file with size and sha256; "complete"          always, last

Every file is written under a temporary name and renamed into place. ``manifest.json`` is written
first, saying ``"complete": false`` with the reason :data:`INTERRUPTED`, and rewritten last with
what was written: a process killed (or interrupted) mid-export leaves a directory that every reader
lists as incomplete. A failure never propagates into the training loop (a full disk included): it
is recorded in the manifest where it still can be, and warned about naming the folder and the cause.
A window that ended because the user's code raised says so in ``window.ended_on_exception``.
"""

from __future__ import annotations

import datetime
import os
import shutil
import traceback
from pathlib import Path

from ..formats import profile as layout
from ..formats.profile import INTERRUPTED, load_manifest, verify_profile  # noqa: F401  (this module's API)
from .capture import Window, warn_once
from .config import NeuronConfig, ProfileMode
from .framework_trace import FrameworkView, write_json_atomic
from .hostsamples import HostSampler


def _autograd_profile(prof):
    """The ``torch.autograd.profiler.profile`` behind a ``torch.profiler.profile`` (or itself)."""
    inner = getattr(prof, "profiler", None)
    return inner if inner is not None and hasattr(inner, "kineto_results") else prof


class NeuronProfiler:
    """Exports Neuron profiles: pass ``export_trace`` as ``on_trace_ready``."""

    def __init__(self, config: NeuronConfig | None = None) -> None:
        if config is not None and not isinstance(config, NeuronConfig):
            raise TypeError(f"NeuronProfiler expects a NeuronConfig, got {type(config).__name__}")
        self.config = config
        self.exports: list[Path] = []

    @property
    def last_export(self) -> Path | None:
        return self.exports[-1] if self.exports else None

    # --- the handler ------------------------------------------------------------------------
    def export_trace(self, prof) -> Path | None:
        """Write the profile directory of ``prof``'s last recording window; returns its path."""
        ap = _autograd_profile(prof)
        w: Window | None = getattr(ap, "_trnscope_window", None)
        if w is None:
            cfg = self.config
            warn_once(cfg, "no_window", "export_trace: this profiler session recorded no Neuron window (was "
                      "experimental_config a NeuronConfig, and did the window close?); nothing written.")
            return None
        if w.open:
            raise RuntimeError("export_trace: the profiling window is still recording; call it from on_trace_ready "
                               "or after the profile context has exited")
        cfg = w.config
        try:
            out_dir = self._window_dir(cfg, w)
            self._write_manifest(out_dir, w, cfg, [], False, INTERRUPTED, [])
        except Exception as exc:  # a full disk, a read-only folder: warn, never break the user's loop
            warn_once(None, "", f"no profile written under {cfg.profile_output_dir}: {type(exc).__name__}: {exc}")
            return None
        files: list[dict] = []
        warnings_list: list[str] = []
        complete, reason = True, None
        try:
            ntff_files = self._device_files(cfg, w, out_dir, files, warnings_list)
            view = FrameworkView(ap, w)
            trace_path = out_dir / layout.FRAMEWORK_TRACE
            self._write_json(trace_path, view.document(ntff_files, trace_name=str(trace_path)),
                             layout.KIND_FRAMEWORK_TRACE, files)
            if cfg.has(ProfileMode.RUNTIME) and w.capture_device:
                from .system_trace import build_system_trace

                self._write_json(out_dir / layout.SYSTEM_TRACE, build_system_trace(view, ntff_files),
                                 layout.KIND_SYSTEM_TRACE, files)
            if w.sampler is not None:
                self._host_files(cfg, w, w.sampler, out_dir, files)
        except Exception as exc:  # record, warn, never break the user's loop
            complete = False
            reason = f"{type(exc).__name__}: {exc}"
            warnings_list.append(traceback.format_exc(limit=5))
        if w.missing:
            warnings_list.append(f"{len(w.missing)} device execution(s) in flight at window close were not captured; "
                                 f"call torch.neuron.synchronize() before prof.step()")
        try:
            self._write_manifest(out_dir, w, cfg, files, complete, reason, warnings_list)
        except Exception as exc:  # the provisional manifest stays: the profile reads as interrupted
            complete, reason = False, f"manifest.json not rewritten ({type(exc).__name__}: {exc})"
        if not complete:
            _remove_temporary_files(out_dir)
            warn_once(None, "", f"the profile in {out_dir} is incomplete: {reason}")
        w.exported.append(out_dir)
        self.exports.append(out_dir)
        return out_dir

    __call__ = export_trace

    # --- pieces -----------------------------------------------------------------------------
    @staticmethod
    def _window_dir(cfg: NeuronConfig, w: Window) -> Path:
        root = Path(cfg.profile_output_dir) / f"{w.hostname}_pid_{w.pid}"
        stamp = datetime.datetime.fromtimestamp(w.wall_start).strftime("%Y%m%d_%H%M%S_%f")
        d = root / stamp
        k = 1
        while d.exists():
            d = root / f"{stamp}_{k}"
            k += 1
        d.mkdir(parents=True)
        return d

    @staticmethod
    def _add_file(path: Path, kind: str, files: list[dict], **extra) -> None:
        files.append(layout.file_entry(path, kind, **extra))

    def _write_json(self, path: Path, doc, kind: str, files: list[dict]) -> None:
        write_json_atomic(path, doc)
        self._add_file(path, kind, files)

    def _device_files(self, cfg: NeuronConfig, w: Window, out_dir: Path, files: list[dict],
                      warnings_list: list[str]) -> dict:
        """NEFF + NTFF per executed NEFF (DEVICE mode); returns {(neff_id, nc): ntff file name}."""
        if not (cfg.has(ProfileMode.DEVICE) and w.capture_device):
            return {}
        from ..isa import neff as neff_format
        from . import ntff

        by_neff: dict[int, list] = {}
        for r in w.records:
            if r.kind == "kernel" and r.program is not None:
                by_neff.setdefault(r.neff_id, []).append(r)
        budget: dict[int, int] = {}
        capped: dict[int, int] = {}
        out: dict = {}
        for neff_id, recs in by_neff.items():
            program = recs[0].program
            path = out_dir / layout.neff_file_name(neff_id)
            tmp = layout.temporary_name(path)
            cached = cfg.neff_cache_dir / layout.neff_file_name(neff_id) if cfg.neff_cache_dir else None
            if cached is not None and cached.is_file():
                shutil.copyfile(cached, tmp)
                source = "neff_cache_dir"
            else:
                neff_format.save(program, tmp)
                source = "program"
            os.replace(tmp, path)
            self._add_file(path, layout.KIND_NEFF, files, neff_id=str(neff_id), name=program.name, source=source)
            for nc in sorted({r.device for r in recs}):
                on_nc = [r for r in recs if r.device == nc]
                tl = on_nc[0].timeline
                n = int(tl.summary.get("instruction_count", len(program.instructions)))
                left = cfg.max_events_per_nc - budget.get(nc, 0)
                keep = max(0, min(n, left))
                budget[nc] = budget.get(nc, 0) + keep
                truncated = keep < n
                if truncated:
                    capped[nc] = capped.get(nc, 0) + (n - keep)
                header = {
                    "neff_id": str(neff_id), "neff_name": program.name, "neff_file": layout.neff_file_name(neff_id),
                    "vnc": nc, "instance_id": 0, "target": tl.spec.name, "neuroncore": tl.spec.neuroncore,
                    "time_unit": "ns", "time_base": "start of the NEFF execution",
                    "framework_ops": list(program.ops),
                    "executions": [{"seq": r.seq, "framework_op": r.op,
                                    "start_ns": w.clockmap.to_epoch(r.device_start_ns),
                                    "end_ns": w.clockmap.to_epoch(r.device_end_ns),
                                    "queue_wait_ns": r.queue_wait_ns} for r in on_nc],
                    "summary": tl.summary,
                    # the compiler's FP32 matmul precision for this NEFF (compiler.precision): "none"
                    # when no matmul was cast
                    "matmul_auto_cast": str(program.meta.get("auto_cast", "none")),
                    "instruction_count": n, "instructions_written": keep, "truncated": truncated,
                    "max_events_per_nc": cfg.max_events_per_nc,
                }
                name = layout.ntff_file_name(neff_id, nc)
                p = out_dir / name
                tmpn = layout.temporary_name(p)
                key = (neff_id, tl.spec.name) if cfg.precache_node_info else None
                ntff.write_ntff(tmpn, header, tl, limit=keep if truncated else None, cache_key=key)
                os.replace(tmpn, p)
                self._add_file(p, layout.KIND_NTFF, files, neff_id=str(neff_id), vnc=nc, truncated=truncated,
                               instructions=keep)
                out[(neff_id, nc)] = name
        # what re-lowering each NEFF for another target needs (`trnscope retime`): its OpCall, or
        # null for a NEFF that has none (a compiled graph's)
        from ..compiler import recipe

        recipes = {str(neff_id): recipe.recipe_of(neff_id) for neff_id in by_neff}
        if recipes:
            path = out_dir / layout.RECIPES
            write_json_atomic(path, recipes)
            self._add_file(path, layout.KIND_RECIPES, files)
        for nc, dropped in capped.items():
            msg = (f"NeuronCore {nc}: {dropped} instruction event(s) beyond max_events_per_nc="
                   f"{cfg.max_events_per_nc} were not written; the NTFFs concerned say truncated=true. "
                   f"Raise NeuronConfig(max_events_per_nc=...) to keep them.")
            warnings_list.append(msg)
            warn_once(cfg, f"cap{nc}", msg)
        return out

    def _host_files(self, cfg: NeuronConfig, w: Window, s: HostSampler, out_dir: Path, files: list[dict]) -> None:
        to_epoch = w.clockmap.to_epoch
        if cfg.has(ProfileMode.CPU_UTIL):
            rows = [{"cpu_id": cpu, "timestamp": to_epoch(t0), "duration": t1 - t0, "util": round(util, 3),
                     "instance_id": w.hostname}
                    for t0, t1, cpu, util in s.cpu_samples]
            schema, version = layout.CPU_UTIL_SCHEMA
            doc = {"schema": schema, "version": version, "clock": "emulated", "time_unit": "ns",
                   "interval_ns": s.interval_ns, "source": "model",
                   "note": "the emulated program's host thread: util is percent of one CPU busy over "
                           "[timestamp, +duration] of emulated time, 100 minus the share it waited for the "
                           "device (cpu_id -1); the emulator's own work is not in it",
                   "samples": rows}
            self._write_json(out_dir / layout.CPU_UTIL, doc, layout.KIND_CPU_UTIL, files)
        if cfg.has(ProfileMode.HOST_MEMORY):
            rows = []
            for t, vals in s.mem_samples:
                total = vals.get("mem_total", 0)
                rows.append({"timestamp": to_epoch(t), "usage": vals.get("rss", 0),
                             "percent_usage": round(100.0 * vals.get("rss", 0) / total, 4) if total else 0.0,
                             "peak_usage": vals.get("hwm", 0), "vm_size": vals.get("vm_size", 0),
                             "emulated_device_bytes": vals.get("device_bytes", 0),
                             "mem_total": total, "mem_available": vals.get("mem_available", 0),
                             "instance_id": w.hostname})
            schema, version = layout.HOST_MEM_SCHEMA
            doc = {"schema": schema, "version": version, "clock": "emulated", "time_unit": "ns",
                   "units": "bytes", "interval_ns": s.interval_ns,
                   "note": "usage is the process's resident set minus the host memory the emulator holds for "
                           "the NeuronCores' HBM (emulated_device_bytes); peak_usage, vm_size, mem_* are the "
                           "process's and machine's as read",
                   "samples": rows}
            self._write_json(out_dir / layout.HOST_MEM, doc, layout.KIND_HOST_MEM, files)

    def _write_manifest(self, out_dir: Path, w: Window, cfg: NeuronConfig, files: list[dict], complete: bool,
                        reason, warnings_list: list[str]) -> None:
        import torch

        import trnscope

        # files on disk that the manifest does not list (left by a failure) make it incomplete
        listed = {f["path"] for f in files}
        stray = sorted(p.name for p in out_dir.iterdir()
                       if p.name not in listed and p.name != layout.MANIFEST and not layout.is_temporary(p.name))
        if stray and complete:
            complete, reason = False, f"unlisted files in the directory: {stray}"
        window = {
            "id": w.id,
            "start_ns": w.clockmap.to_epoch(w.start_em),
            "end_ns": w.clockmap.to_epoch(w.close_em if w.close_em is not None else w.start_em),
            "clock": "emulated",
            "host_time": w.host_time,
            **w.target_metadata(),
            "neuron_cores": w.cores,
            "active_neuron_cores": w.lane_cores(),
            "executions": len(w.records),
            "kernels": sum(1 for r in w.records if r.kind == "kernel"),
            "missing_in_flight": len(w.missing),
            "ended_on_exception": w.ended_on_exception,
        }
        doc = layout.manifest_document(
            complete=complete, reason=reason, trnscope_version=trnscope.__version__, torch_version=torch.__version__,
            instance_id=w.hostname, process_id=w.pid, window=window, config=cfg.to_dict(), warnings=warnings_list,
            files=files)
        write_json_atomic(out_dir / layout.MANIFEST, doc)


def _remove_temporary_files(out_dir: Path) -> None:
    """Half-written files of a failed export: their space is given back (the disk may be full)."""
    for path in out_dir.iterdir():
        if layout.is_temporary(path.name):
            try:
                path.unlink()
            except OSError:
                pass
