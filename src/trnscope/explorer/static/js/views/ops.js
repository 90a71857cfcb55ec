// Operator table: per framework op its calls, host (self/total) and device time, dispatches, NEFFs
// and bytes moved; expanding a row lists the NEFFs (or kernels) it ran, with links to their
// device traces and to the op in the system trace. Below: the device kernels / NEFFs table.

import { api } from "../api.js";
import { el, fmtBytes, fmtCount, fmtPct, fmtPercentValue, fmtTime, fill } from "../format.js";
import { DataTable, downloadText } from "../widgets/table.js";
import { deviceHash, errorPanel, framedHash, go, loading, systemHash } from "./common.js";

export async function opsView(main, { id }) {
  fill(main, loading("Building the operator table…"));
  let data;
  try {
    data = await api.ops(id);
  } catch (err) {
    fill(main, errorPanel(err));
    return {};
  }
  const neuron = data.kind === "neuron";
  const deviceTotal = Math.max(data.device_total_ns, 1);
  const time = (v) => fmtTime(v);
  const columns = [
    { key: "name", title: "Operator", format: (v) => el("span.op-name", {}, v) },
    { key: "category", title: "Category" },
    { key: "calls", title: "Calls", align: "right", format: fmtCount },
    { key: "cpu_total_ns", title: "CPU total", align: "right", format: time, tip: "Host time including children" },
    { key: "cpu_self_ns", title: "CPU self", align: "right", format: time, tip: "Host time excluding child events" },
    { key: "device_total_ns", title: "Device total", align: "right", format: time, tip: "Device time of everything this op launched, directly or through its children" },
    { key: "device_self_ns", title: "Device self", align: "right", format: time, tip: "Device time launched by this op itself (its nearest op)" },
    { key: "device_share", title: "% device", align: "right", value: (r) => r.device_self_ns / deviceTotal, format: (v) => fmtPct(v),
      tip: "Device self time / all device time (a fraction in the CSV)" },
    { key: "dispatches", title: "Dispatches", align: "right", format: fmtCount, tip: "Device executions launched under this op" },
    { key: "program_count", title: neuron ? "NEFFs" : "Kernels", align: "right", value: (r) => r.programs.length, format: fmtCount },
    { key: "bytes", title: neuron ? "HBM / copy bytes" : "Copy bytes", align: "right", format: fmtBytes },
  ];
  const filter = el("input.filter", { type: "search", placeholder: "Filter operators…", "aria-label": "Filter operators" });
  const onlyDevice = el("input", { type: "checkbox" });
  const table = new DataTable({
    columns, rows: data.ops, sortKey: "device_self_ns",
    filter: (row, text) => row.name.toLowerCase().includes(text) || row.category.toLowerCase().includes(text),
    expand: (row) => opDetail(id, row, neuron),
    rowClass: (row) => (row.category.endsWith("_runtime") ? "runtime" : ""),
    className: "ops-table",
  });
  const csvName = (what) => `${(data.name || "profile").replace(/[^\w.-]+/g, "_")}-${what}.csv`;
  // what the table shows (filters and sort applied), every row, raw numbers
  const download = el("button.csv-download", {
    title: "Download the rows shown (filter and sort applied) as CSV",
    onclick: () => downloadText(table.toCSV([{ key: "programs", value: (r) => r.programs }]), csvName("operators")),
  }, "Download CSV");
  const applyFilters = () => {
    table.setRows(onlyDevice.checked ? data.ops.filter((r) => r.dispatches > 0) : data.ops);
    table.setFilter(filter.value);
  };
  filter.addEventListener("input", applyFilters);
  onlyDevice.addEventListener("change", applyFilters);

  const kernelColumns = [
    { key: "name", title: neuron ? "NEFF / copy" : "Kernel / copy" },
    { key: "ops", title: "Launched by", value: (r) => r.ops.join(", "), csv: (r) => r.ops },
    { key: "calls", title: "Calls", align: "right", format: fmtCount },
    { key: "device_total_ns", title: "Total", align: "right", format: time },
    { key: "avg", title: "Avg", align: "right", value: (r) => r.device_total_ns / r.calls, format: time },
    { key: "device_min_ns", title: "Min", align: "right", format: time },
    { key: "device_max_ns", title: "Max", align: "right", format: time },
    { key: "bytes", title: "Bytes", align: "right", format: fmtBytes },
  ];
  if (neuron) {
    kernelColumns.push({ key: "mbu_percent", title: "MBU", align: "right", format: (v) => fmtPercentValue(v) },
      { key: "mfu_percent", title: "MFU", align: "right", format: (v) => fmtPercentValue(v) },
      { key: "bottleneck", title: "Busiest engine" },
      { key: "trace", title: "", value: () => "", format: (v, r) => deviceButtons(id, r.program, r.ntff, r.name), csv: false });
  }
  const kernels = new DataTable({ columns: kernelColumns, rows: data.kernels, sortKey: "device_total_ns", className: "kernels-table",
    onRowClick: null });

  fill(main, 
    el("div.page-head", {},
      el("div", {}, el("h1", {}, "Operators"), el("p.muted", {}, `${data.name} · host CPU self ${fmtTime(data.cpu_self_total_ns)} · device ${fmtTime(data.device_total_ns)}`)),
      el("div.toolbar", {}, filter, el("label", {}, onlyDevice, " only ops with device work"), download)),
    el("p.muted", {}, "Click a row for its NEFFs and links. Times are sums over all calls, like prof.key_averages()."),
    el("div.table-wrap", {}, table.node),
    el("div.section-head", {}, el("h2", {}, neuron ? "NEFFs and copies" : "Device kernels and copies"),
      el("button.csv-download.kernels", { title: "Download this table as CSV",
        onclick: () => downloadText(kernels.toCSV([{ key: "program", value: (r) => r.program }]), csvName(neuron ? "neffs" : "kernels")) },
      "Download CSV")),
    el("div.table-wrap", {}, kernels.node));
  return {};
}

function opDetail(id, row, neuron) {
  const parts = [];
  if (row.neffs && row.neffs.length) {
    parts.push(el("table.mini", {},
      el("tr", {}, ["NEFF", "Executions", "Device time", "Busiest engine", "MBU", "Device trace"].map((h) => el("th", {}, h))),
      row.neffs.map((n) => el("tr", {},
        el("td", {}, n.name, el("span.muted", {}, ` ${n.neff_id}`)), el("td", {}, fmtCount(n.executions)),
        el("td", {}, fmtTime(n.device_time_ns)), el("td", {}, n.bottleneck || "–"), el("td", {}, fmtPercentValue(n.mbu_percent)),
        el("td", {}, deviceButtons(id, n.neff_id, n.ntff, n.name))))));
  } else if (row.programs.length) {
    parts.push(el("p", {}, `${neuron ? "NEFFs" : "Kernels"}: ${row.programs.join(", ")}`));
  } else {
    parts.push(el("p.muted", {}, "No device work under this op."));
  }
  if (row.first_row >= 0 && row.first_ts !== null) {
    parts.push(el("button.first-call", { onclick: async (e) => {
      e.stopPropagation();
      try {
        go(framedHash(id, await api.source(id).details(row.first_row)));
      } catch {
        go(systemHash(id, { ts: row.first_ts, dur: row.cpu_total_ns / Math.max(row.calls, 1), row: row.first_row }));
      }
    } }, "Show first call in the system trace"));
  }
  return el("div.op-detail", { onclick: (e) => e.stopPropagation() }, parts);
}

function deviceButtons(id, neffId, ntff, name) {
  const cores = Object.keys(ntff || {});
  if (!cores.length) return el("span.muted", {}, "no NTFF");
  return el("span", {}, cores.map((nc) => el("button.small.device-link", {
    "data-neff": neffId, "data-nc": nc, title: `Open the device trace of ${name} on NeuronCore ${nc}`,
    onclick: (e) => { e.stopPropagation(); go(deviceHash(id, { neff_id: neffId, nc })); },
  }, `Device trace NC ${nc}`)));
}

export default opsView;
