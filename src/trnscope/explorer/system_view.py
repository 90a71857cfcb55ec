"""The system trace view of a profile: every lane of the profile's timeline, with links from
device executions (and the ops that caused them) to their device traces."""

from __future__ import annotations

from collections.abc import Callable

from ..analysis.device_work import device_work
from ..analysis.memory import memory_timeline
from ..analysis.profile import NEURON, Profile
from ..analysis.source_lines import FRAME, ExecutionLines
from ..sourceline import is_library, parse_frame
from .layout import memory_series_id, system_layout
from .views import TimelineView


class SystemView(TimelineView):
    def __init__(self, profile: Profile, name: str | None = None,
                 lines: Callable[[], ExecutionLines] | None = None) -> None:
        """``lines()``: the source line of each device execution (``ProfileAnalysis.execution_lines``),
        asked for when a slice's details are."""
        memory = memory_timeline(profile.trace)
        series = {}
        for index, m in enumerate(memory.devices):
            series[memory_series_id(index, "allocated")] = (m.ts_ns, m.allocated)
            if m.reserved is not None:
                series[memory_series_id(index, "reserved")] = (m.ts_ns, m.reserved)
        super().__init__(profile.trace, system_layout(profile.trace, neuron=profile.kind == NEURON, memory=memory),
                         series=series)
        self.profile = profile
        self.name = name or profile.name
        self._executions: dict[int, int] | None = None
        self._lines = lines
        self._work_index: dict[int, int] | None = None

    def describe(self) -> dict:
        return {**super().describe(), "kind": self.profile.kind, "name": self.name}

    def extra_details(self, row: int, details: dict) -> dict:
        rows = [row] + [item["row"] for item in details["downstream"]] + [item["row"] for item in details["upstream"]]
        out: dict = {"device_traces": self.device_links(rows)}
        source = self.source_line(row, details)
        if source is not None:
            out["source"] = source
        return out

    def source_line(self, row: int, details: dict) -> dict | None:
        """The line of the user's code behind a slice: a device execution's own; the line recorded
        with a runtime call; for an op, the line of the first device work it launched; else the
        innermost Python frame of the user's code around it ({line, origin}; origin as in
        ``analysis.source_lines``)."""
        lines = self._lines() if self._lines is not None else None
        if lines is None:
            return None
        if self._work_index is None:
            self._work_index = {int(r): i for i, r in enumerate(device_work(self.trace).rows.tolist())}
        index = self._work_index.get(row)
        if index is not None:
            return lines.of(index)
        recorded = (details.get("args") or {}).get("source")
        if isinstance(recorded, str) and recorded:
            return {"line": recorded, "origin": "call"}
        for item in details["downstream"]:
            index = self._work_index.get(item["row"])
            found = lines.of(index) if index is not None else None
            if found is not None:
                return found
        frame = parse_frame(details["name"])
        if frame is not None and not is_library(frame.file):
            return {"line": str(frame), "origin": FRAME}
        above = lines.frames.line_above(row)
        return {"line": str(above), "origin": FRAME} if above is not None else None

    def device_links(self, rows: list[int]) -> list[dict]:
        """Device traces (NTFFs present on disk) of the executions among ``rows``."""
        files = self.profile.files
        if files is None or not files.ntffs:
            return []
        links, seen = [], set()
        for row, args in zip(rows, self.trace.slices.args.get_many(rows)):
            neff_id = args.get("neff_id")
            core = args.get("nc", args.get("device"))
            if neff_id is None or not isinstance(core, int) or (str(neff_id), core) not in files.ntffs:
                continue
            seq = args.get("seq", args.get("correlation"))
            key = (str(neff_id), core, seq)
            if key in seen:
                continue
            seen.add(key)
            links.append({"neff_id": str(neff_id), "nc": core, "seq": seq,
                          "name": str(args.get("neff_name") or self.trace.strings[int(self.trace.slices.name[row])]),
                          "ntff": files.ntffs[(str(neff_id), core)].name, "row": int(row)})
        return links

    def execution_row(self, seq: int) -> int | None:
        """The framework-stream slice of device execution ``seq`` (its ``correlation``), for
        jumping to it."""
        if self._executions is None:
            work = device_work(self.trace)
            self._executions = {}
            for row, args in zip(work.rows.tolist(), work.args):
                key = args.correlation if args.correlation is not None else args.seq
                if isinstance(key, int):
                    self._executions.setdefault(key, int(row))
        return self._executions.get(seq)
