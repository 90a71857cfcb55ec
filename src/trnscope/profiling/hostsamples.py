"""Host CPU utilisation and host memory samples (ProfileMode.CPU_UTIL / HOST_MEMORY).

Read straight from Linux procfs (no psutil): ``/proc/stat`` per-CPU jiffies for utilisation,
``/proc/self/status`` (VmRSS, VmHWM, VmSize) and ``/proc/meminfo`` (MemTotal, MemAvailable) for
memory; ``resource.getrusage`` stands in where procfs is missing. A daemon thread samples every
``interval_s`` while the profiling window is open, plus once at open and once at close, stamping
each sample with ``time.perf_counter_ns()`` (mapped onto the emulated clock at export).
"""

from __future__ import annotations

import os
import threading
import time

DEFAULT_INTERVAL_S = 0.01


def read_cpu_times() -> dict[int, tuple[int, int]] | None:
    """cpu id (-1 = all CPUs) -> (busy jiffies, total jiffies); None without /proc/stat."""
    try:
        with open("/proc/stat", "rb") as f:
            data = f.read().decode()
    except OSError:
        return None
    out = {}
    for line in data.splitlines():
        if not line.startswith("cpu"):
            break
        parts = line.split()
        name = parts[0]
        vals = [int(v) for v in parts[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)   # idle + iowait
        total = sum(vals[:8])                                 # guest time is already in user/nice
        out[-1 if name == "cpu" else int(name[3:])] = (total - idle, total)
    return out


def _read_kv(path: str) -> dict[str, int]:
    out = {}
    try:
        with open(path, "rb") as f:
            for line in f.read().decode().splitlines():
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    mult = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
                    out[key] = int(parts[0]) * mult
    except OSError:
        pass
    return out


def read_host_memory() -> dict[str, int]:
    """Process and host memory in bytes: rss, hwm (peak rss), vm_size, mem_total, mem_available."""
    st = _read_kv("/proc/self/status")
    mi = _read_kv("/proc/meminfo")
    out = {
        "rss": st.get("VmRSS", 0),
        "hwm": st.get("VmHWM", 0),
        "vm_size": st.get("VmSize", 0),
        "mem_total": mi.get("MemTotal", 0),
        "mem_available": mi.get("MemAvailable", 0),
    }
    if not out["rss"]:
        try:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
            out["rss"] = out["hwm"] = peak
        except Exception:
            pass
    return out


class HostSampler:
    """Samples CPU utilisation and/or host memory on a daemon thread between start() and stop()."""

    def __init__(self, cpu: bool, memory: bool, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.cpu, self.memory, self.interval_s = cpu, memory, interval_s
        self.cpu_samples: list[tuple[int, int, int, float]] = []  # (t0 ns, t1 ns, cpu id, util %)
        self.mem_samples: list[tuple[int, dict[str, int]]] = []   # (t ns, values)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[int, dict] | None = None

    def _sample(self) -> None:
        now = time.perf_counter_ns()
        if self.cpu:
            times = read_cpu_times()
            if times is not None:
                if self._last is not None:
                    t0, prev = self._last
                    for cpu, (busy, total) in times.items():
                        if cpu in prev:
                            db, dt = busy - prev[cpu][0], total - prev[cpu][1]
                            util = 100.0 * db / dt if dt > 0 else 0.0
                            self.cpu_samples.append((t0, now, cpu, max(0.0, min(100.0, util))))
                self._last = (now, times)
        if self.memory:
            self.mem_samples.append((now, read_host_memory()))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> None:
        self._sample()
        self._thread = threading.Thread(target=self._run, name="trnscope-host-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sample()

    @staticmethod
    def cpu_count() -> int:
        return os.cpu_count() or 1
