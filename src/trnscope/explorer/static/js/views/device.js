// Device trace: one NEFF execution on one NeuronCore. Rows per DMA queue and engine, instructions
// coloured by the PyTorch op they came from, semaphore waits in red, DMA and SBUF/PSUM usage
// counters; clicking an instruction shows its semaphore dependencies as arrows and tables.

import { api } from "../api.js";
import { colorFor, WAIT_COLOR } from "../colors.js";
import { el, fmtBytes, fmtCount, fmtPercentValue, fmtTime, fill } from "../format.js";
import { Timeline } from "../timeline/timeline.js";
import { renderDetails, renderSelection } from "../widgets/details.js";
import { errorPanel, systemHash } from "./common.js";
import { attachFlags, enableSplitter, showInPane } from "./system.js";

export async function deviceView(main, { id, neff, nc, query }) {
  const info = el("div.device-info");
  const pane = el("div.details-pane.idle", {}, el("p.muted", {}, "Click an instruction for its operands and dependencies."));
  const host = el("div.timeline-host");
  const page = el("div.trace-page", {}, info, host, el("div.splitter"), pane);
  fill(main, page);
  const { flags, unsubscribe } = attachFlags(id, `device/${neff}/${Number(nc)}`, () => timeline);
  const timeline = new Timeline(host, api.source(id, "device", { neff, nc }), {
    onFlag: flags.onFlag,
    toolbarExtra: flags.menu.node,
    onSelect: (details) => showInPane(pane, details ? renderDetails(details, { onJump: (item) => timeline.focus(item) }) : null),
    onRange: (summary) => { if (summary) showInPane(pane, renderSelection(summary)); },
    onError: (err) => showInPane(pane, errorPanel(err, { title: "Request failed" })),
  });
  let layout;
  try {
    layout = await timeline.init();
  } catch (err) {
    unsubscribe();
    timeline.destroy();
    fill(main, errorPanel(err, { title: "This device trace cannot be opened" }));
    return {};
  }
  flags.ready();
  info.append(header(layout, id, query.seq ? Number(query.seq) : null));
  enableSplitter(page);
  return { destroy() { unsubscribe(); timeline.destroy(); }, timeline };
}

function header(layout, id, seq) {
  const s = layout.summary || {};
  const engines = s.engines || {};
  const bars = ["tensor", "vector", "scalar", "gpsimd", "sync", "dma"].filter((e) => engines[e]).map((e) =>
    el("div.engine-bar", { title: `${e}: ${fmtPercentValue(engines[e].active_time_percent)} active, ${fmtCount(engines[e].instruction_count)} instructions` },
      el("span.name", {}, e),
      el("span.track", {}, el("span.fill", { style: `width:${Math.min(100, engines[e].active_time_percent || 0)}%` })),
      el("span.value", {}, fmtPercentValue(engines[e].active_time_percent, 0))));
  const executions = (layout.executions || []).map((e) => {
    const here = seq !== null && e.seq === seq;
    return el(`li${here ? ".current" : ""}`, {},
      `execution ${e.seq}${e.framework_op ? ` (${e.framework_op})` : ""}${e.queue_wait_ns ? `, queued ${fmtTime(e.queue_wait_ns)}` : ""} · `,
      e.system_ts !== undefined
        ? el("a.link", { href: systemHash(id, { ts: e.system_ts, dur: e.system_dur, row: e.system_row }) }, "show in system trace")
        : el("span.muted", {}, "not in the system trace"));
  });
  const legend = [...(layout.framework_ops || []).map((op) => el("span.chip", {}, el("span.swatch", { style: `background:${colorFor(op)}` }), op)),
    el("span.chip", {}, el("span.swatch", { style: `background:${WAIT_COLOR}` }), "semaphore wait")];
  return el("div", {},
    el("div.device-title", {},
      el("h1", {}, layout.neff_name || `NEFF ${layout.neff_id}`),
      el("span.muted", {}, `NEFF ${layout.neff_id} · NeuronCore ${layout.nc} · ${layout.neuroncore || ""} (${layout.target || ""}) · `
        + `${fmtCount(layout.instructions_written)} instructions`)),
    layout.truncated ? el("p.warning", {}, `Truncated: ${fmtCount(layout.instructions_written)} of ${fmtCount(layout.instruction_count)} instructions were written (max_events_per_nc).`) : null,
    el("div.device-facts", {},
      el("div.figures", {},
        fig("device time", fmtTime(s.total_time_ns)), fig(layout.peak_text ? `MFU of ${layout.peak_text}` : "MFU",
          fmtPercentValue(layout.mfu_percent ?? s.mfu_estimated_percent),
          `model FLOPs over TensorE's peak for the dtype its matmuls streamed; ${fmtPercentValue(s.mfu_estimated_percent)} of the BF16 peak`),
        fig("MBU", fmtPercentValue(s.mbu_estimated_percent)), fig("HBM traffic", fmtBytes((s.hbm_read_bytes || 0) + (s.hbm_write_bytes || 0))),
        fig("DMA transfers", fmtCount(s.dma_transfer_count)), fig("avg DMA", fmtBytes(s.dma_transfer_average_bytes)),
        fig("busiest engine", s.bottleneck || "–"),
        ...memoryFigures(layout.memory || {})),
      el("div.engines", {}, bars)),
    el("div.legend", {}, el("span.muted", {}, "Colour = originating op: "), legend),
    opTable(layout.op_table || []),
    lineTable(layout.line_table || []),
    executions.length ? el("details.executions", {}, el("summary", {}, `${executions.length} execution(s) of this NEFF in the profile`), el("ul", {}, executions)) : null);
}

// Time per originating op (and source line, inside a compiled graph): open when the NEFF holds
// more than one op.
function opTable(rows) {
  if (!rows.length) return null;
  const table = el("table.mini.op-time", {},
    el("tr", {}, ["Op (source line)", "Instructions", "Busy", "Share of the NEFF", "HBM bytes"].map((h) => el("th", {}, h))),
    rows.map((r) => el("tr", {},
      el("td", {}, el("span.swatch", { style: `background:${colorFor(r.op)}` }), r.op),
      el("td", {}, fmtCount(r.instructions)), el("td", {}, fmtTime(r.busy_ns)),
      el("td", {}, r.share === null ? "–" : fmtPercentValue(100 * r.share)), el("td", {}, fmtBytes(r.hbm_bytes)))));
  return el("details.op-times", rows.length > 1 ? { open: true } : {},
    el("summary", {}, `Time per op (${rows.length})`), table);
}

// Time per source line: inside a compiled graph (the FX nodes' lines) or an NKI kernel (the
// kernel line of each ISA call); absent for a NEFF of one eager op.
function lineTable(rows) {
  if (!rows.length) return null;
  const table = el("table.mini.line-time", {},
    el("tr", {}, ["Source line", "From", "Ops", "Instructions", "Busy", "Share of the NEFF", "HBM bytes"].map((h) => el("th", {}, h))),
    rows.map((r) => el("tr", {},
      el("td.source-line", {}, r.line), el("td", {}, r.origin === "nki" ? "NKI kernel" : r.origin === "graph" ? "compiled graph" : "–"),
      el("td", {}, r.ops.join(", ")), el("td", {}, fmtCount(r.instructions)), el("td", {}, fmtTime(r.busy_ns)),
      el("td", {}, r.share === null ? "–" : fmtPercentValue(100 * r.share)), el("td", {}, fmtBytes(r.hbm_bytes)))));
  return el("details.line-times", { open: true }, el("summary", {}, `Time per source line (${rows.length})`), table);
}

// Peak on-chip usage (from the NTFF's allocation table); NTFFs without one say so once.
function memoryFigures(memory) {
  const spaces = [["sbuf", "SBUF peak"], ["psum", "PSUM peak"]].filter(([k]) => memory[k]);
  if (!spaces.length) return [fig("SBUF / PSUM", "not recorded", "This NTFF has no allocation table (written before NTFF 1.1): no usage rows")];
  return spaces.map(([k, label]) => {
    const m = memory[k];
    const share = m.peak_percent !== null && m.peak_percent !== undefined ? ` · ${fmtPercentValue(m.peak_percent)}` : "";
    return fig(`${label}${share}`, fmtBytes(m.peak_bytes),
      `${label} at ${fmtTime(m.peak_ns)} of ${m.capacity_bytes ? fmtBytes(m.capacity_bytes) : "unknown capacity"}; ${fmtCount(m.allocations)} live ranges`);
  });
}

function fig(label, value, title = undefined) {
  return el("div.figure", { title }, el("span.value", {}, value), el("span.label", {}, label));
}

export default deviceView;
