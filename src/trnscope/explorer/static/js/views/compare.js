// Compare two profiles: headline deltas, operators aligned by name (added, removed, changed) and
// the two timelines stacked with one synchronised window (each measured from the start of its activity).

import { api } from "../api.js";
import { el, fmtBytes, fmtCount, fmtPct, fmtPercentValue, fmtRatio, fmtSigned, fmtTime, fill } from "../format.js";
import { entries } from "../store.js";
import { Timeline } from "../timeline/timeline.js";
import { DataTable } from "../widgets/table.js";
import { errorPanel, go, loading } from "./common.js";

const FORMAT = {
  wall_ns: fmtTime, busy_ns: fmtTime, device_time_ns: fmtTime, cpu_self_ns: fmtTime, idle_ns: fmtTime, hbm_bytes: fmtBytes,
  executions: fmtCount, dispatches: fmtCount, programs: fmtCount, busy_share: fmtPct, window_busy_share: fmtPct,
  launch_overhead_share: fmtPct,
  mfu_percent: (v) => fmtPercentValue(v), mfu_bf16_percent: (v) => fmtPercentValue(v), mbu_percent: (v) => fmtPercentValue(v),
};

// A difference of two percentages is in percentage points: "+2.3%" would read as a relative change.
const points = (fraction) => (v) => `${(v * (fraction ? 100 : 1)).toFixed(1)} pp`;
const DELTA_FORMAT = {
  busy_share: points(true), window_busy_share: points(true), launch_overhead_share: points(true), mfu_percent: points(false), mfu_bf16_percent: points(false), mbu_percent: points(false),
};

export async function compareView(main, { base, test }) {
  fill(main, loading("Comparing…"));
  let listing;
  try { listing = await entries(); } catch (err) { fill(main, errorPanel(err)); return {}; }
  const pickers = el("div.toolbar", {}, picker("Base", base, listing, (v) => go(`#/compare/${v}/${test || ""}`)),
    el("span", {}, "vs"), picker("Test", test, listing, (v) => go(`#/compare/${base || ""}/${v}`)));
  const head = el("div.page-head", {}, el("div", {}, el("h1", {}, "Compare profiles"),
    el("p.muted", {}, "Deltas are test − base (pp: percentage points); a ratio below 1× means the test is smaller.")), pickers);
  if (!base || !test) {
    fill(main, head, el("p.muted", {}, "Pick a base and a test profile."));
    return {};
  }
  let data;
  try { data = await api.compare(base, test); } catch (err) { fill(main, head, errorPanel(err, { title: "Cannot compare" })); return {}; }

  const summary = el("table.data-table.compare-summary", {},
    el("thead", {}, el("tr", {}, ["Metric", `Base: ${side(data.base)}`, `Test: ${side(data.test)}`, "Δ", "Ratio"].map((h) => el("th", {}, h)))),
    el("tbody", {}, data.summary.map((row) => {
      const f = FORMAT[row.key] || String;
      const better = improvement(row);
      return el(`tr${better === null ? "" : better ? ".better" : ".worse"}`, { "data-key": row.key },
        el("td", {}, row.label), el("td.right", {}, row.base === null ? "–" : f(row.base)),
        el("td.right", {}, row.test === null ? "–" : f(row.test)),
        el("td.right.delta", {}, row.delta === null ? "–" : fmtSigned(row.delta, DELTA_FORMAT[row.key] || f)),
        el("td.right", {}, fmtRatio(row.ratio)));
    })));

  const opRows = data.ops.map((d) => ({ ...d, __key: d.name }));
  const filter = el("input.filter", { type: "search", placeholder: "Filter operators…" });
  const ops = new DataTable({
    columns: [
      { key: "name", title: "Operator" },
      { key: "status", title: "In", format: (v) => ({ both: "both", added: "test only", removed: "base only" }[v]) },
      { key: "base_device", title: "Base device", align: "right", value: (r) => r.base.device_total_ns, format: fmtTime },
      { key: "test_device", title: "Test device", align: "right", value: (r) => r.test.device_total_ns, format: fmtTime },
      { key: "delta_device", title: "Δ device", align: "right", value: (r) => r.delta.device_total_ns, format: (v) => fmtSigned(v, fmtTime) },
      { key: "ratio_device", title: "Ratio", align: "right", value: (r) => r.ratio.device_total_ns, format: fmtRatio },
      { key: "base_calls", title: "Base calls", align: "right", value: (r) => r.base.calls, format: fmtCount },
      { key: "test_calls", title: "Test calls", align: "right", value: (r) => r.test.calls, format: fmtCount },
      { key: "delta_dispatches", title: "Δ dispatches", align: "right", value: (r) => r.delta.dispatches, format: (v) => fmtSigned(v, fmtCount) },
      { key: "delta_cpu", title: "Δ CPU total", align: "right", value: (r) => r.delta.cpu_total_ns, format: (v) => fmtSigned(v, fmtTime) },
      { key: "delta_bytes", title: "Δ bytes", align: "right", value: (r) => r.delta.bytes, format: (v) => fmtSigned(v, fmtBytes) },
    ],
    rows: opRows, filter: (r, text) => r.name.toLowerCase().includes(text),
    rowClass: (r) => r.status, className: "compare-ops",
  });
  filter.addEventListener("input", () => ops.setFilter(filter.value));

  // NEFFs aligned by name: for a profile and its `trnscope retime` copy, each NEFF on both targets
  const kernels = new DataTable({
    columns: [
      { key: "name", title: "NEFF / copy" },
      { key: "status", title: "In", format: (v) => ({ both: "both", added: "test only", removed: "base only" }[v]) },
      { key: "base_calls", title: "Base calls", align: "right", format: fmtCount },
      { key: "test_calls", title: "Test calls", align: "right", format: fmtCount },
      { key: "base_device_ns", title: "Base device", align: "right", format: fmtTime },
      { key: "test_device_ns", title: "Test device", align: "right", format: fmtTime },
      { key: "delta_device_ns", title: "Δ device", align: "right", format: (v) => fmtSigned(v, fmtTime) },
      { key: "ratio", title: "Ratio", align: "right", format: fmtRatio },
    ],
    rows: (data.kernels || []).map((k) => ({ ...k, __key: k.name })), sortKey: "delta_device_ns",
    rowClass: (r) => r.status, className: "compare-kernels",
  });
  const retimeNote = [data.base, data.test].some((s) => s.retimed)
    ? el("p.muted.retime-note", {}, "A re-timed copy keeps the recorded host intervals: its device work moved, its host did not "
      + "(a host that waited on the device would have waited a different time).") : null;

  const recs = el("div.two-col", {},
    el("div", {}, el("h4", {}, "Base findings"), el("ul", {}, data.base.recommendations.map((r) => el("li", {}, r)))),
    el("div", {}, el("h4", {}, "Test findings"), el("ul", {}, data.test.recommendations.map((r) => el("li", {}, r)))));

  const stackA = el("div.timeline-host.stacked-host");
  const stackB = el("div.timeline-host.stacked-host");
  fill(main, head,
    el("section", {}, el("h2", {}, "Summary"), retimeNote, summary, recs),
    el("section", {}, el("div.section-head", {}, el("h2", {}, "Operators"), filter), el("div.table-wrap", {}, ops.node)),
    el("section", {}, el("h2", {}, "NEFFs and copies"), el("div.table-wrap", {}, kernels.node)),
    el("section", {}, el("h2", {}, "Timelines (synchronised, each from the start of its recorded activity)"),
      el("h4", {}, `Base: ${side(data.base)}`), stackA, el("h4", {}, `Test: ${side(data.test)}`), stackB));
  const timelines = [];
  // each timeline is measured from the start of its own recorded activity, so the first steps line up
  const sync = (from) => (t0, t1) => {
    for (const t of timelines) {
      if (t === from) continue;
      const shift = t.layout.focus_start - from.layout.focus_start;
      t.setWindow(t0 + shift, t1 + shift, { silent: true });
    }
  };
  const a = new Timeline(stackA, api.source(base), {});
  const b = new Timeline(stackB, api.source(test), {});
  a.options.onWindow = sync(a);
  b.options.onWindow = sync(b);
  timelines.push(a, b);
  try {
    const [la, lb] = await Promise.all([a.init(), b.init()]);
    const span = Math.max(la.focus_end - la.focus_start, lb.focus_end - lb.focus_start, 1000);
    a.setWindow(la.focus_start - span * 0.01, la.focus_start + span * 1.01);
  } catch (err) {
    stackA.append(errorPanel(err, { title: "Timeline unavailable" }));
  }
  return { destroy() { a.destroy(); b.destroy(); } };
}

// A profile's name with its target and, for a `trnscope retime` copy, what it was re-timed from.
function side(s) {
  const notes = [s.target, s.retimed ? `retimed from ${s.retimed.from_target || "?"}${s.retimed.overrides.length ? ` with ${s.retimed.overrides.join(", ")}` : ""}` : null]
    .filter(Boolean);
  return notes.length ? `${s.name} (${notes.join("; ")})` : s.name;
}

function improvement(row) {
  if (row.delta === null || row.delta === 0) return null;
  const higherIsBetter = ["busy_share", "window_busy_share", "mfu_percent", "mfu_bf16_percent", "mbu_percent"].includes(row.key);
  return higherIsBetter ? row.delta > 0 : row.delta < 0;
}

function picker(label, value, listing, onChange) {
  const select = el("select", { "aria-label": label, onchange: (e) => onChange(e.target.value) },
    el("option", { value: "" }, `— ${label.toLowerCase()} —`),
    listing.entries.map((e) => el("option", { value: e.id, selected: e.id === value }, e.name)));
  return el("label.picker", {}, `${label} `, select);
}

export default compareView;
