// Summary: key metrics, per-engine activity, where the device's time went (busy / waiting for
// the host / launch latency), ranked recommendations, the largest idle gaps, and the NEFF table.

import { api } from "../api.js";
import { el, fmtBytes, fmtCount, fmtPct, fmtPercentValue, fmtTime, fill } from "../format.js";
import { DataTable } from "../widgets/table.js";
import { deviceHash, errorPanel, go, loading, systemHash } from "./common.js";

export async function summaryView(main, { id }) {
  fill(main, loading("Analysing…"));
  let s;
  try {
    s = await api.summary(id);
  } catch (err) {
    fill(main, errorPanel(err));
    return {};
  }
  const h = s.headline;
  const d = s.device;
  const idle = s.idle;
  const neuron = s.kind === "neuron";
  const metric = (label, value, tip) => el("div.metric", { title: tip || "" }, el("span.value", {}, value), el("span.label", {}, label));
  const metrics = el("div.metrics", {},
    metric("Wall time", fmtTime(h.wall_ns), "First to last event in the trace"),
    metric("Device time", fmtTime(d.device_time_ns), "Sum of execution durations"),
    metric("Executions", fmtCount(d.executions), `${fmtCount(d.kernels)} kernels/NEFFs, ${fmtCount(d.copies)} copies`),
    metric(neuron ? "Distinct NEFFs" : "Distinct kernels", fmtCount(d.programs)),
    metric("Host CPU (self)", fmtTime(h.cpu_self_ns)),
    metric("MFU", fmtPercentValue(d.mfu_percent), "Model FLOPs over peak, time-weighted"),
    metric("MBU", fmtPercentValue(d.mbu_percent), "HBM bytes over peak bandwidth, time-weighted"),
    metric("HBM traffic", fmtBytes(d.hbm_read_bytes + d.hbm_write_bytes), `read ${fmtBytes(d.hbm_read_bytes)}, write ${fmtBytes(d.hbm_write_bytes)}`),
    metric("DMA transfers", fmtCount(d.dma_transfers), d.dma_transfers ? `average ${fmtBytes(d.dma_average_bytes)}` : "from NTFF summaries"),
    metric("Copies", fmtBytes(d.copy_bytes), `${fmtCount(d.copies)} host↔device copies, ${fmtTime(d.copy_time_ns)}`));

  const shares = idle.shares;
  const breakdown = idle.span_ns ? el("div.breakdown", {},
    el("div.stacked", {},
      seg("busy", shares.busy, "Device busy"), seg("host", shares.host_dispatch, "Waiting for host dispatch"),
      seg("launch", shares.launch_latency, "Launch latency"), seg("unknown", shares.unknown, "Idle, cause unknown")),
    el("div.legend", {},
      key("busy", `busy ${fmtPct(shares.busy)}`), key("host", `waiting for host dispatch ${fmtPct(shares.host_dispatch)}`),
      key("launch", `launch latency ${fmtPct(shares.launch_latency)}`), shares.unknown ? key("unknown", `unknown ${fmtPct(shares.unknown)}`) : null),
    el("p", {}, el("b", {}, idle.regime), ` over the device's active span of ${fmtTime(idle.span_ns)}: `,
      `${fmtCount(idle.gap_count)} gaps, launch-overhead share ${fmtPct(idle.launch_overhead_share)}.`))
    : el("p.muted", {}, "No device executions in this trace.");

  const engines = d.engines && d.engines.length ? el("div.engines.wide", {}, d.engines.map((e) =>
    el("div.engine-bar", { title: `${fmtCount(e.instruction_count)} instructions, semaphore waits ${fmtTime(e.semaphore_wait_ns)}` },
      el("span.name", {}, e.engine), el("span.track", {}, el("span.fill", { style: `width:${Math.min(100, e.active_percent)}%` })),
      el("span.value", {}, fmtPercentValue(e.active_percent)))))
    : el("p.muted", {}, neuron ? "No NTFF device traces in this profile (record with ProfileMode.DEVICE)." : "Per-engine activity needs a Neuron profile.");

  const recs = s.recommendations.length ? el("ol.recs", {}, s.recommendations.map((r) => el("li", {},
    el("div.rec-head", {}, el("span.sev", { "data-sev": r.severity }, r.severity), el("b", {}, r.title)),
    el("p", {}, r.detail))))
    : el("p.muted", {}, "No findings: nothing in this profile crossed a rule's threshold.");

  const gaps = new DataTable({
    columns: [
      { key: "ts", title: "At", align: "right", format: fmtTime },
      { key: "duration_ns", title: "Idle", align: "right", format: fmtTime },
      { key: "cause", title: "Cause", format: (v) => v.replace("_", " ") },
      { key: "host_wait_ns", title: "Waiting for host", align: "right", format: fmtTime },
      { key: "launch_ns", title: "Launch latency", align: "right", format: fmtTime },
      { key: "before", title: "After execution" },
      { key: "after", title: "Before execution" },
      { key: "after_op", title: "Launched by" },
      { key: "lane_title", title: "Lane" },
    ],
    rows: idle.largest, sortKey: "duration_ns",
    onRowClick: (g) => go(systemHash(id, { ts: g.ts, dur: g.duration_ns })),
    className: "gaps-table",
  });

  const neffs = new DataTable({
    columns: [
      { key: "name", title: neuron ? "NEFF" : "Kernel" },
      { key: "framework_ops", title: "Framework op", value: (r) => r.framework_ops.join(", ") },
      { key: "executions", title: "Calls", align: "right", format: fmtCount },
      { key: "device_time_ns", title: "Total", align: "right", format: fmtTime },
      { key: "avg", title: "Avg", align: "right", value: (r) => r.device_time_ns / Math.max(r.executions, 1), format: fmtTime },
      { key: "mfu_percent", title: "MFU", align: "right", format: (v) => fmtPercentValue(v) },
      { key: "mbu_percent", title: "MBU", align: "right", format: (v) => fmtPercentValue(v) },
      { key: "dma_average_bytes", title: "Avg DMA", align: "right", format: (v) => (v ? fmtBytes(v) : "–") },
      { key: "bottleneck", title: "Bottleneck" },
      { key: "links", title: "", value: () => "", format: (v, r) => el("span", {}, Object.keys(r.ntff || {}).map((nc) =>
        el("button.small.device-link", { onclick: () => go(deviceHash(id, { neff_id: r.neff_id, nc })) }, `Device trace NC ${nc}`))) },
    ],
    rows: d.neffs, sortKey: "device_time_ns", className: "neff-table",
  });

  const warnings = s.warnings.length ? el("ul.warnings", {}, s.warnings.map((w) => el("li", {}, w))) : null;
  fill(main, 
    el("div.page-head", {}, el("div", {}, el("h1", {}, "Summary"), el("p.muted", {}, [`${s.name} · ${h.regime}`,
      s.kind === "neuron" ? ` · ${h.target || "target unknown"} · host time ${h.host_time || "unknown"}` : ""].join("")))),
    warnings,
    el("section", {}, el("h2", {}, "Performance insights & recommendations"), recs),
    el("section", {}, el("h2", {}, "Key metrics"), metrics),
    el("section", {}, el("h2", {}, "Where the device's time went"), breakdown),
    el("section", {}, el("h2", {}, "Engine activity (share of device time)"), engines),
    el("section", {}, el("h2", {}, "Largest idle gaps between device executions"),
      idle.largest.length ? el("div.table-wrap", {}, gaps.node) : el("p.muted", {}, "No gaps."),
      el("p.muted", {}, "Click a gap to see it in the system trace.")),
    el("section", {}, el("h2", {}, neuron ? "Device profiles (NEFFs)" : "Kernels"),
      d.neffs.length ? el("div.table-wrap", {}, neffs.node) : el("p.muted", {}, "See the Operators page for kernels.")));
  return {};
}

function seg(kind, share, title) {
  return share > 0 ? el(`span.seg.${kind}`, { style: `width:${(share * 100).toFixed(2)}%`, title: `${title}: ${fmtPct(share)}` }) : null;
}

function key(kind, text) {
  return el("span.key", {}, el(`span.dot.${kind}`), text);
}
