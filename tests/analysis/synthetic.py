"""Small Kineto traces written event by event, for tests that need an exact situation: kernels on
several streams, launches after or before the device went idle, waits on other streams.

Times are microseconds, as Kineto writes them. Every kernel gets a ``cudaLaunchKernel`` (or the
runtime call named) on the host thread at ``launch`` and an ``ac2g`` flow to it, as real traces do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

HOST_PID, HOST_TID = 100, 100


@dataclass
class KinetoBuilder:
    device_label: str = "GPU 0"
    device_pid: int = 0
    runtime_category: str = "cuda_runtime"
    launch_name: str = "cudaLaunchKernel"
    metadata: dict = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    _correlation: int = 0
    _streams: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self.events += [
            {"ph": "M", "name": "process_labels", "pid": HOST_PID, "tid": 0, "args": {"labels": "CPU"}},
            {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": HOST_TID, "args": {"name": "main"}},
            {"ph": "M", "name": "process_labels", "pid": self.device_pid, "tid": 0,
             "args": {"labels": self.device_label}},
        ]

    def op(self, name: str, ts: float, dur: float, cat: str = "cpu_op", args: dict | None = None) -> None:
        event = {"ph": "X", "cat": cat, "name": name, "pid": HOST_PID, "tid": HOST_TID, "ts": ts, "dur": dur}
        if args:
            event["args"] = args
        self.events.append(event)

    def kernel(self, name: str, ts: float, dur: float, stream: int = 7, launch: float | None = None,
               cat: str = "kernel", launch_dur: float = 2.0, args: dict | None = None) -> int:
        """A device execution; ``launch`` (host time of its runtime call) None means no launch in the
        trace. Returns its correlation id."""
        self._correlation += 1
        c = self._correlation
        if stream not in self._streams:
            self._streams.add(stream)
            self.events.append({"ph": "M", "name": "thread_name", "pid": self.device_pid, "tid": stream,
                                "args": {"name": f"stream {stream} "}})
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": self.device_pid, "tid": stream, "ts": ts,
                            "dur": dur, "args": {"stream": stream, "correlation": c, "device": 0, **(args or {})}})
        if launch is not None:
            self.events.append({"ph": "X", "cat": self.runtime_category, "name": self.launch_name, "pid": HOST_PID,
                                "tid": HOST_TID, "ts": launch, "dur": launch_dur, "args": {"correlation": c}})
            self.events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": c, "pid": HOST_PID,
                                "tid": HOST_TID, "ts": launch})
            self.events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": c, "pid": self.device_pid,
                                "tid": stream, "ts": ts, "bp": "e"})
        return c

    def memory(self, ts: float, nbytes: int, allocated: int, reserved: int | None = None, device_type: int = 1,
               device_id: int = 0) -> None:
        args = {"Bytes": nbytes, "Total Allocated": allocated, "Device Type": device_type, "Device Id": device_id,
                "Addr": 1}
        if reserved is not None:
            args["Total Reserved"] = reserved
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": HOST_PID,
                            "tid": HOST_TID, "ts": ts, "args": args})

    def write(self, path: Path) -> Path:
        path.write_bytes(orjson.dumps({"schemaVersion": 1, **self.metadata, "traceEvents": self.events}))
        return path


def write_ntff(path: Path, header: dict, tables: dict[str, dict[str, list]]) -> Path:
    """An NTFF in the documented layout (docs/file-formats.md): fixed header, JSON header, one
    Parquet file per table. Only what the analyses read needs to be there."""
    import hashlib
    import io
    import struct

    import pyarrow as pa
    import pyarrow.parquet as pq

    body, entries = b"", {}
    for name, columns in tables.items():
        buffer = io.BytesIO()
        pq.write_table(pa.table(columns), buffer)
        blob = buffer.getvalue()
        entries[name] = {"offset": len(body), "length": len(blob), "rows": len(next(iter(columns.values()))),
                         "encoding": "parquet", "columns": list(columns)}
        body += blob
    text = orjson.dumps({**header, "tables": entries})
    fixed = struct.pack("<4sHHIQ32s", b"NTFF", 1, 1, len(text), len(body), hashlib.sha256(body).digest())
    path.write_bytes(fixed + text + body)
    return path
