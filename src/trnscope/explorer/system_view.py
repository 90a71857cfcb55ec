"""The system trace view of a profile: every lane of the profile's timeline, with links from
device executions (and the ops that caused them) to their device traces."""

from __future__ import annotations

from ..analysis.device_work import device_work
from ..analysis.memory import memory_timeline
from ..analysis.profile import NEURON, Profile
from .layout import memory_series_id, system_layout
from .views import TimelineView


class SystemView(TimelineView):
    def __init__(self, profile: Profile, name: str | None = None) -> None:
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

    def describe(self) -> dict:
        return {**super().describe(), "kind": self.profile.kind, "name": self.name}

    def extra_details(self, row: int, details: dict) -> dict:
        rows = [row] + [item["row"] for item in details["downstream"]] + [item["row"] for item in details["upstream"]]
        return {"device_traces": self.device_links(rows)}

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
