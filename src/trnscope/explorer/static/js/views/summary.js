// Summary: key metrics, per-engine activity, where the device's time went (busy / waiting for
// the host / launch latency), ranked recommendations, the largest idle gaps, and the NEFF table.

import { api } from "../api.js";
import { el, fmtBytes, fmtCount, fmtPct, fmtPercentValue, fmtTime, fill, mfuLabel } from "../format.js";
import { rooflineChart } from "../widgets/roofline.js";
import { stepOverview } from "../widgets/steps.js";
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
    metric("Device time", fmtTime(d.device_time_ns), "Sum of execution durations (streams running together count twice)"),
    metric("Device busy", fmtPct(h.busy_share), "Any stream running, over the device's span (HTA's temporal breakdown)"),
    metric("Busy of the window", fmtPct(h.window_busy_share), "Device busy time over the profile's activity window"),
    metric("Executions", fmtCount(d.executions), `${fmtCount(d.kernels)} kernels/NEFFs, ${fmtCount(d.copies)} copies`),
    metric(neuron ? "Distinct NEFFs" : "Distinct kernels", fmtCount(d.programs)),
    metric("Host CPU (self)", fmtTime(h.cpu_self_ns)),
    metric(mfuLabel(h), fmtPercentValue(d.mfu_percent), `${h.mfu_text || "MFU"}: model FLOPs over TensorE's peak for the dtype `
      + "each kernel streamed (FP32 at a quarter of BF16's rate), time-weighted"),
    metric("MBU", fmtPercentValue(d.mbu_percent), "HBM bytes over peak bandwidth, time-weighted"),
    neuron || d.hbm_read_bytes + d.hbm_write_bytes ? metric("HBM traffic", fmtBytes(d.hbm_read_bytes + d.hbm_write_bytes),
      `read ${fmtBytes(d.hbm_read_bytes)}, write ${fmtBytes(d.hbm_write_bytes)}`) : null,
    neuron ? metric("DMA transfers", fmtCount(d.dma_transfers), d.dma_transfers ? `average ${fmtBytes(d.dma_average_bytes)}` : "from NTFF summaries") : null,
    metric("Copies", fmtBytes(d.copy_bytes), `${fmtCount(d.copies)} copies, ${fmtTime(d.copy_time_ns)}`),
    h.peak_memory_bytes !== null ? metric("Peak memory", fmtBytes(h.peak_memory_bytes), "Highest allocated total of a device") : null);

  // the profile's activity window, as the regime is decided: busy and every reason the device waited
  const w = idle.window_shares;
  const parts = [
    ["busy", w.busy, "Device busy (any stream)"], ["host", w.host_dispatch, "Waiting for host dispatch"],
    ["outside", w.outside, "Before the first / after the last execution (host-side work)"],
    ["launch", w.launch_latency, "Launch latency"], ["dependency", w.dependency, "Submitted, waiting on a dependency"],
    ["unknown", w.unknown, "Idle, cause unknown"]];
  const breakdown = idle.executions ? el("div.breakdown", {},
    el("div.stacked", {}, parts.map(([kind, share, title]) => seg(kind, share, title))),
    el("div.legend", {}, parts.filter(([kind, share]) => share > 0 || kind === "busy").map(([kind, share, title]) =>
      key(kind, `${title.toLowerCase()} ${fmtPct(share)}`))),
    el("p", {}, el("b", {}, idle.regime), ` over the profile's ${fmtTime(idle.window_ns)}`,
      idle.devices > 1 ? ` (× ${idle.devices} devices)` : "",
      `: ${fmtTime(idle.busy_ns)} of device work; over the devices' own span (first to last execution, `,
      `HTA's temporal breakdown) busy ${fmtPct(idle.shares.busy)}; ${fmtCount(idle.gap_count)} idle gaps.`))
    : el("p.muted", {}, "No device executions in this trace.");

  const use = deviceUseTable(s.utilization);
  const limits = limitsTable(s.kernel_limits || [], d.kernel_time_ns);
  const memory = memorySection(s.memory, id);

  const engines = d.engines && d.engines.length ? el("div.engines.wide", {}, d.engines.map((e) =>
    el("div.engine-bar", { title: `${fmtCount(e.instruction_count)} instructions, semaphore waits ${fmtTime(e.semaphore_wait_ns)}` },
      el("span.name", {}, e.engine), el("span.track", {}, el("span.fill", { style: `width:${Math.min(100, e.active_percent)}%` })),
      el("span.value", {}, fmtPercentValue(e.active_percent)))))
    : el("p.muted", {}, neuron ? "No NTFF device traces in this profile (record with ProfileMode.DEVICE)." : "Per-engine activity needs a Neuron profile.");

  const recs = s.recommendations.length ? el("ol.recs", {}, s.recommendations.map((r) => el("li", {},
    el("div.rec-head", {}, el("span.sev", { "data-sev": r.severity }, r.severity), el("b", {}, r.title)),
    el("p", {}, r.detail),
    el("details.evidence", {}, el("summary", {}, "Evidence"), evidenceTable(r.evidence)))))
    : el("p.muted", {}, "No findings: nothing in this profile crossed a rule's threshold.");

  const gaps = new DataTable({
    columns: [
      { key: "ts", title: "At", align: "right", format: fmtTime },
      { key: "duration_ns", title: "Idle", align: "right", format: fmtTime },
      { key: "cause", title: "Cause", format: (v) => v.replace("_", " ") },
      { key: "host_wait_ns", title: "Waiting for host", align: "right", format: fmtTime },
      { key: "launch_ns", title: "Launch latency", align: "right", format: fmtTime },
      { key: "dependency_ns", title: "Waiting on dependency", align: "right", format: fmtTime },
      { key: "after", title: "Next execution" },
      { key: "after_op", title: "Launched by" },
      { key: "lane_title", title: "Lane" },
      { key: "device", title: "Device" },
    ],
    rows: idle.largest, sortKey: "duration_ns",
    onRowClick: (g) => go(systemHash(id, { ts: g.ts, dur: g.duration_ns, mark: `idle gap (${g.cause.replace("_", " ")})` })),
    className: "gaps-table",
  });

  const limitOf = Object.fromEntries((s.kernel_limits || []).map((k) => [k.neff_id, k]));
  const neffs = new DataTable({
    columns: [
      { key: "name", title: neuron ? "NEFF" : "Kernel" },
      { key: "framework_ops", title: "Framework op", value: (r) => r.framework_ops.join(", ") },
      { key: "executions", title: "Calls", align: "right", format: fmtCount },
      { key: "device_time_ns", title: "Total", align: "right", format: fmtTime },
      { key: "avg", title: "Avg", align: "right", value: (r) => r.device_time_ns / Math.max(r.executions, 1), format: fmtTime },
      { key: "mfu_percent", title: "MFU", align: "right", format: (v) => fmtPercentValue(v) },
      { key: "peak_flops_per_s", title: "Of peak", value: (r) => r.peak_flops_per_s || 0, format: (v, r) => peakCell(r) },
      { key: "mbu_percent", title: "MBU", align: "right", format: (v) => fmtPercentValue(v) },
      { key: "dma_average_bytes", title: "Avg DMA", align: "right", format: (v) => (v ? fmtBytes(v) : "–") },
      { key: "bottleneck", title: "Busiest engine" },
      { key: "limiter", title: "Limiter", value: (r) => (limitOf[r.neff_id] ? limitOf[r.neff_id].limiter : "–") },
      { key: "links", title: "", value: () => "", format: (v, r) => el("span", {}, Object.keys(r.ntff || {}).map((nc) =>
        el("button.small.device-link", { onclick: () => go(deviceHash(id, { neff_id: r.neff_id, nc })) }, `Device trace NC ${nc}`))) },
    ],
    rows: d.neffs, sortKey: "device_time_ns", className: "neff-table",
  });

  // the roofline reads the NEFFs' instruction tables: asked for once the page is up
  const roofline = neuron && d.neffs.length ? el("section.roofline-section", {}, el("h2", {}, "Roofline"), loading("Reading the NTFFs…")) : null;
  if (roofline) {
    api.roofline(id).then((r) => {
      const body = r.neffs.length ? rooflineChart(r, { onOpen: (p) => go(deviceHash(id, { neff_id: p.neff_id, nc: p.nc ?? 0 })) })
        : el("p.muted", {}, "No NTFF summaries to place.");
      roofline.replaceChildren(el("h2", {}, "Roofline"), body, ...(r.problems || []).map((p) => el("p.warning", {}, p)));
    }, (err) => roofline.replaceChildren(el("h2", {}, "Roofline"), errorPanel(err, { title: "No roofline" })));
  }
  const warnings = s.warnings.length ? el("ul.warnings", {}, s.warnings.map((w) => el("li", {}, w))) : null;
  fill(main, 
    el("div.page-head", {}, el("div", {}, el("h1", {}, "Summary"),
      el("p.muted", {}, [`${s.name} · ${s.device_kind.label} · ${h.regime}`,
        s.kind === "neuron" ? ` · ${h.target || "target unknown"} · host time ${h.host_time || "unknown"}` : ""].join("")))),
    warnings,
    el("section", {}, el("h2", {}, "Performance insights & recommendations"), recs),
    el("section", {}, el("h2", {}, "Key metrics"), metrics),
    el("section", {}, el("h2", {}, "Where the profile's time went"), breakdown),
    s.steps && s.steps.length ? el("section.steps-section", {}, el("h2", {}, "Per-step overview"),
      stepOverview(s.steps, { onOpen: (st) => go(systemHash(id, { ts: st.ts, dur: st.dur_ns, row: st.row })) })) : null,
    use ? el("section", {}, el("h2", {}, "Device use per device and stream"), use) : null,
    limits ? el("section", {}, el("h2", {}, "Costliest NEFFs: roofline position and limiter"), limits) : null,
    roofline,
    memory ? el("section", {}, el("h2", {}, "Memory over time"), memory) : null,
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

function evidenceTable(evidence) {
  const rows = Object.entries(evidence || {});
  return el("table.facts", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, evidenceValue(k, v)))));
}

function evidenceValue(key, value) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") {
    if (key.endsWith("_ns")) return fmtTime(value);
    if (key.endsWith("bytes")) return fmtBytes(value);
    if (key.includes("share") || key === "comm_comp_overlap") return fmtPct(value);
    if (key.endsWith("_percent")) return fmtPercentValue(value);
    return fmtCount(Math.round(value * 1000) / 1000);
  }
  return typeof value === "string" ? value : JSON.stringify(value);
}

function deviceUseTable(use) {
  if (!use || !use.devices.length) return null;
  const rows = [];
  for (const dev of use.devices) {
    rows.push({ name: dev.device, span_ns: dev.span_ns, busy: dev.busy_share, idle: dev.idle_share,
      compute: dev.compute_share, noncompute: dev.non_compute_share, overlap: dev.comm_comp_overlap, device: true });
    for (const st of [...dev.streams].sort((a, b) => b.busy_ns - a.busy_ns)) {
      rows.push({ name: `  ${st.name}`, span_ns: st.span_ns, busy: st.busy_share, executions: st.executions });
    }
  }
  const table = el("table.data-table.use-table", {},
    el("thead", {}, el("tr", {}, ["Device / stream", "Span", "Busy", "Idle", "Compute", "Non-compute", "Comm/comp overlap"]
      .map((t, i) => el("th", { class: i ? "num" : "" }, t)))),
    el("tbody", {}, rows.map((r) => el(r.device ? "tr.device-row" : "tr", {},
      el("td", {}, r.name), el("td.num", {}, fmtTime(r.span_ns)), el("td.num", {}, fmtPct(r.busy)),
      el("td.num", {}, r.device ? fmtPct(r.idle) : ""), el("td.num", {}, r.device ? fmtPct(r.compute) : ""),
      el("td.num", {}, r.device ? fmtPct(r.noncompute) : ""), el("td.num", {}, r.device ? fmtPct(r.overlap) : "")))));
  // a device that only computed has nothing to break down
  const types = use.devices.filter((dev) => Object.keys(dev.kernel_type_shares).some((k) => k !== "computation")).map((dev) =>
    el("div.kernel-types", {}, el("span.muted", {}, `${dev.device} kernel types: `),
      Object.entries(dev.kernel_type_shares).map(([k, v]) => el("span.key", {}, `${k} ${fmtPct(v)}`))));
  return el("div", {}, el("div.table-wrap", {}, table), types,
    el("p.muted", {}, "Busy: any of the device's streams running (the union of its executions), over its span "
      + "from first to last execution, as HTA's temporal breakdown. Compute: computation kernels; comm/comp "
      + "overlap: share of communication time with computation beside it."));
}

// the TensorE peak a kernel's MFU is against: "FP32 39.3 TFLOP/s" ("–" without TensorE FLOPs)
function peakCell(r) {
  if (!r.peak_dtype) return "–";
  return r.peak_flops_per_s ? `${r.peak_dtype} ${+(r.peak_flops_per_s / 1e12).toFixed(1)} TFLOP/s` : r.peak_dtype;
}

function limitsTable(limits, kernelNs) {
  if (!limits.length) return null;
  const table = new DataTable({
    columns: [
      { key: "ops", title: "Op", value: (r) => (r.ops.length ? r.ops.join(", ") : r.name) },
      { key: "name", title: "NEFF" },
      { key: "device_time_ns", title: "Device time", align: "right", format: fmtTime },
      { key: "share", title: "Share", align: "right", value: (r) => r.device_time_ns / Math.max(kernelNs, 1), format: (v) => fmtPct(v) },
      { key: "mfu_percent", title: "MFU", align: "right", format: (v) => fmtPercentValue(v) },
      { key: "peak_flops_per_s", title: "Of peak", value: (r) => r.peak_flops_per_s || 0, format: (v, r) => peakCell(r) },
      { key: "mbu_percent", title: "MBU", align: "right", format: (v) => fmtPercentValue(v) },
      { key: "position", title: "Roofline", value: (r) => r.position || "–" },
      // TensorE at a rate other than BF16's says which (as `trnscope summary` does)
      { key: "limiter", title: "Limiter", value: (r) => (r.limiter.startsWith("TensorE compute") && r.peak_dtype
        && !r.peak_dtype.startsWith("BF16") && !r.peak_dtype.startsWith("mixed") ? `${r.limiter} at ${r.peak_dtype} rate` : r.limiter) },
      { key: "explanation", title: "Why" },
    ],
    rows: limits, sortKey: "device_time_ns", className: "limits-table",
  });
  return el("div.table-wrap", {}, table.node);
}

// Memory over time: one chart per device on one time axis (the span of all devices' samples), so
// the devices line up. An allocation freed at the same instant (a Kineto trace's stamps are whole
// microseconds) is drawn at least SPIKE units wide: a zero-width rise and fall drew nothing.
function memorySection(memory, id) {
  if (!memory || !memory.devices.length) return null;
  const times = memory.devices.flatMap((m) => m.points.map((p) => p[0]));
  const span = times.length ? [Math.min(...times), Math.max(...times)] : [0, 1];
  return el("div.memory", {}, memory.devices.map((m) => el("div.memory-device", {},
    el("div", {}, el("b", {}, m.device), ` peak ${fmtBytes(m.peak_bytes)}`,
      m.peak_reserved_bytes ? `, reserved up to ${fmtBytes(m.peak_reserved_bytes)}` : "",
      `; ${fmtCount(m.allocations)} allocations, ${fmtCount(m.frees)} frees (${m.source})`,
      m.peak_ts !== undefined ? el("button.small", { onclick: () => go(systemHash(id, { ts: m.peak_ts, dur: 0 })) }, "Show peak") : null),
    sparkline(m.points, m.peak_bytes, span))));
}

const WIDTH = 600;
const MARGIN = 6; // units kept free at each end, so a step at the first or last sample shows
const SPIKE = 2;

export function sparklinePath(points, peak, [t0, t1]) {
  if (!points.length) return "";
  const scale = (WIDTH - 2 * MARGIN) / Math.max(t1 - t0, 1);
  const top = Math.max(peak, 1);
  let path = `M0,60 L${MARGIN},60`;
  let x = MARGIN;
  let last = 0;
  let lastY = 60;
  for (const [t, v] of points) {
    // time only moves right; a fall less than SPIKE after the rise before it is moved right, so
    // the peak between them keeps a width
    let at = Math.max(MARGIN + (t - t0) * scale, x);
    if (v < last && at - x < SPIKE) at = Math.min(x + SPIKE, WIDTH);
    const y = 58 - (v / top) * 54;
    path += ` L${at.toFixed(1)},${lastY.toFixed(1)} L${at.toFixed(1)},${y.toFixed(1)}`;
    x = at;
    last = v;
    lastY = y;
  }
  return `${path} L${WIDTH},${lastY.toFixed(1)} L${WIDTH},60 Z`;
}

function sparkline(points, peak, span) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "sparkline");
  svg.setAttribute("viewBox", `0 0 ${WIDTH} 60`);
  svg.setAttribute("preserveAspectRatio", "none");
  if (points.length) {
    const area = document.createElementNS(NS, "path");
    area.setAttribute("d", sparklinePath(points, peak, span));
    svg.append(area);
  }
  return svg;
}

export default summaryView;
