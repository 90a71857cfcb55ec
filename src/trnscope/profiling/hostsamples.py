"""Host CPU utilisation and host memory samples (ProfileMode.CPU_UTIL / HOST_MEMORY), of the
emulated program rather than of the emulator.

On Trainium these samples show what the training process costs its host. Read from this
machine's /proc they would show the emulator: its numerics keep a CPU at 100% while the emulated
host is idle, waiting for the device. So both series are derived from the emulated clock:

* **CPU utilisation**, per interval of emulated time: the share of it that the program's host
  thread was not waiting for the device (``torch.neuron.synchronize()``, ``.cpu()``, ``.item()``,
  blocking copies): 100% while it dispatches, 0% while it waits. ``cpu_id`` -1 is that thread,
  in percent of one CPU (the program runs one dispatching thread; its other threads, such as
  autograd's, add their work to the same clock).
* **Host memory**: the process's resident set (``/proc/self/status`` VmRSS; ``getrusage`` where
  procfs is missing) minus the bytes the emulator holds for the device (every NeuronCore's
  reserved HBM lives in host memory here, which on Trainium it does not). Sampled when emulated
  time crosses each interval boundary (checked as the runtime records executions) and at the
  window's edges, and stamped with that emulated time.
"""

from __future__ import annotations

from typing import Callable

DEFAULT_INTERVAL_NS = 1_000_000  # 1 ms of emulated time


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


def busy_samples(start_ns: int, end_ns: int, waits: list[tuple[int, int]],
                 interval_ns: int = DEFAULT_INTERVAL_NS) -> list[tuple[int, int, float]]:
    """(t0, t1, util %) per interval of [start_ns, end_ns): 100% minus the share spent in ``waits``
    (emulated [start, end) intervals in which the host waited for the device)."""
    out = []
    t0 = start_ns
    ordered = sorted(waits)
    i = 0
    while t0 < end_ns:
        t1 = min(t0 + interval_ns, end_ns)
        waited = 0
        while i < len(ordered) and ordered[i][1] <= t0:
            i += 1
        j = i
        while j < len(ordered) and ordered[j][0] < t1:
            a, b = ordered[j]
            waited += max(0, min(b, t1) - max(a, t0))
            j += 1
        out.append((t0, t1, max(0.0, min(100.0, 100.0 * (1 - waited / (t1 - t0))))))
        t0 = t1
    return out


class HostSampler:
    """The samples of one profiling window (see the module docstring).

    ``device_bytes``: what the emulator holds for the device right now (subtracted from the RSS);
    ``clock``: the emulated clock, whose waits (kept while it is held) give the CPU series."""

    def __init__(self, cpu: bool, memory: bool, clock, device_bytes: Callable[[], int],
                 interval_ns: int = DEFAULT_INTERVAL_NS) -> None:
        self.cpu, self.memory, self.interval_ns = cpu, memory, interval_ns
        self.clock = clock
        self.device_bytes = device_bytes
        self.mem_samples: list[tuple[int, dict[str, int]]] = []   # (emulated ns, values)
        self.cpu_samples: list[tuple[int, int, int, float]] = []  # (emulated t0, t1, cpu id, util %)
        self._start = 0
        self._waits_from = 0
        self._next = 0

    def _sample_memory(self, now: int) -> None:
        vals = read_host_memory()
        vals["device_bytes"] = held = self.device_bytes()
        vals["rss"] = max(0, vals["rss"] - held)
        self.mem_samples.append((now, vals))
        self._next = now - (now - self._start) % self.interval_ns + self.interval_ns

    def start(self) -> None:
        with self.clock.emulation():
            self._start = now = self.clock.now()
            self._waits_from = len(self.clock.waits)
            if self.memory:
                self._sample_memory(now)

    def tick(self, now: int) -> None:
        """Called as the runtime records work (inside the emulator's cut): a memory sample once
        emulated time has crossed the next interval boundary."""
        if self.memory and now >= self._next:
            self._sample_memory(now)

    def stop(self) -> None:
        with self.clock.emulation():
            end = self.clock.now()
            if self.memory:
                self._sample_memory(end)
            if self.cpu:
                waits = self.clock.waits[self._waits_from:]
                self.cpu_samples = [(t0, t1, -1, util)
                                    for t0, t1, util in busy_samples(self._start, end, waits, self.interval_ns)]
