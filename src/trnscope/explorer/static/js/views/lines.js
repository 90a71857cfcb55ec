// Source lines: device time per line of the user's code (Python line -> op -> NEFF -> instruction).
// A row expands to its ops, its NEFFs (with their device traces, where the instructions of a
// compiled graph or an NKI kernel are grouped by line again) and the line that called it.

import { api, getJSON } from "../api.js";
import { el, fmtCount, fmtPct, fmtTime, fill } from "../format.js";
import { DataTable, downloadText } from "../widgets/table.js";
import { deviceHash, errorPanel, framedHash, go, loading } from "./common.js";

const ORIGIN = {
  call: ["line", "the line that dispatched it (recorded with with_stack=True)"],
  frame: ["function", "the innermost Python frame of your code around the op; Kineto names a frame by its function's first line"],
  backward: ["backward", "autograd's backward of the forward op at this line (paired by sequence number)"],
  "backward call": ["backward() call", "backward work paired with no forward op (gradient accumulation): the line that called backward()"],
  graph: ["compiled graph", "instructions of a torch.compile NEFF labelled from the FX node's stack trace"],
  nki: ["NKI kernel", "instructions issued by this line of an NKI kernel"],
};

export async function linesView(main, { id }) {
  fill(main, loading("Attributing device time to source lines…"));
  let data;
  try {
    data = await getJSON(`/api/entries/${encodeURIComponent(id)}/lines`);
  } catch (err) {
    fill(main, errorPanel(err));
    return {};
  }
  const columns = [
    { key: "line", title: "Source line", format: (v, r) => el("span.source-line", { title: r.file ? `${r.file}, line ${r.number}` : "" }, v) },
    { key: "pass", title: "Pass", value: (r) => (r.backward ? "backward" : "forward") },
    { key: "origin", title: "Found from", value: (r) => (ORIGIN[r.origin] || [r.origin || "–"])[0],
      tip: "How the line was found: the recorded line, the enclosing Python function, the forward op of a backward, a compiled graph's FX stack trace, an NKI kernel" },
    { key: "device_ns", title: "Device time", align: "right", format: fmtTime },
    { key: "share", title: "% device", align: "right", format: (v) => fmtPct(v) },
    { key: "executions", title: "Executions", align: "right", format: fmtCount },
    { key: "ops", title: "Ops", value: (r) => r.ops.map((o) => o.op).join(", "), csv: (r) => r.ops.map((o) => o.op) },
    { key: "callers", title: "Called from", value: (r) => r.callers.join(", "), csv: (r) => r.callers },
  ];
  const filter = el("input.filter", { type: "search", placeholder: "Filter lines, functions, ops…", "aria-label": "Filter source lines" });
  const rows = data.rows.map((r, i) => ({ ...r, __key: i }));
  const table = new DataTable({
    columns, rows, sortKey: "device_ns", className: "lines-table",
    filter: (r, text) => r.line.toLowerCase().includes(text) || r.ops.some((o) => o.op.toLowerCase().includes(text)),
    expand: (r) => lineDetail(id, r, data.device_total_ns),
    rowClass: (r) => (r.origin === "" ? "unknown" : ""),
  });
  filter.addEventListener("input", () => table.setFilter(filter.value));
  const csvName = `${(data.name || "profile").replace(/[^\w.-]+/g, "_")}-source-lines.csv`;
  const download = el("button.csv-download", { title: "Download the rows shown as CSV",
    onclick: () => downloadText(table.toCSV(), csvName) }, "Download CSV");
  const hint = !data.recorded && !data.frames && data.executions
    ? el(data.line_share < 0.999 ? "p.warning" : "p.muted", {}, "This profile has no Python stacks: record it with "
      + "torch.profiler.profile(..., with_stack=True) to give eager ops (and the calls into compiled graphs and NKI kernels) "
      + "their lines. Lines inside compiled graphs and NKI kernels come from the NEFFs and are shown either way.")
    : !data.recorded && data.frames
      ? el("p.muted", {}, "Lines from Kineto's Python frames name the function (its first line), not the line: a trnscope "
        + "profile recorded with with_stack=True records the exact line of each device call.")
      : null;
  fill(main,
    el("div.page-head", {},
      el("div", {}, el("h1", {}, "Source lines"),
        el("p.muted", {}, `${data.name} · ${fmtPct(data.line_share)} of the device time on a known line · `
          + `${fmtCount(data.with_line)} of ${fmtCount(data.executions)} executions with their calling line · device ${fmtTime(data.device_total_ns)}`)),
      el("div.toolbar", {}, filter, download)),
    hint,
    ...(data.problems || []).map((p) => el("p.warning", {}, p)),
    el("p.muted", {}, "Device time per line of your code, adding up to all device time. Click a row for its ops and NEFFs."),
    el("div.table-wrap", {}, table.node));
  return {};
}

function lineDetail(id, row, total) {
  const origin = ORIGIN[row.origin];
  return el("div.op-detail", { onclick: (e) => e.stopPropagation() },
    origin ? el("p.muted", {}, `Found from ${origin[0]}: ${origin[1]}.`) : el("p.muted", {}, "No line known for this device work."),
    el("table.mini.line-ops", {},
      el("tr", {}, ["Op", "Device time", "% of the line"].map((h) => el("th", {}, h))),
      row.ops.map((o) => el("tr", {}, el("td", {}, o.op), el("td", {}, fmtTime(o.device_ns)),
        el("td", {}, fmtPct(o.device_ns / Math.max(row.device_ns, 1)))))),
    row.neffs.length ? el("table.mini.line-neffs", {},
      el("tr", {}, ["NEFF", "Device time", "Device trace"].map((h) => el("th", {}, h))),
      row.neffs.map((n) => neffRow(id, n))) : null,
    row.callers.length ? el("p", {}, "Called from ", row.callers.join(", ")) : null,
    row.first_row >= 0 ? el("button.first-call", { onclick: async (e) => {
      e.stopPropagation();
      go(framedHash(id, await api.source(id).details(row.first_row)));
    } }, "Show first execution in the system trace") : null,
    el("p.muted", {}, `${fmtPct(row.device_ns / Math.max(total, 1))} of the profile's device time.`));
}

function neffRow(id, n) {
  const open = (e) => { e.stopPropagation(); go(deviceHash(id, { neff_id: n.neff_id, nc: n.nc })); };
  return el("tr", {},
    el("td", {}, n.name, el("span.muted", {}, ` ${n.neff_id}`)),
    el("td", {}, fmtTime(n.device_ns)),
    el("td", {}, el("button.small.device-link", { "data-neff": n.neff_id, "data-nc": n.nc, onclick: open }, `Device trace NC ${n.nc}`)));
}

export default linesView;
