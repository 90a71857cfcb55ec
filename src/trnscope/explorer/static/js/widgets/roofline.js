// The roofline chart: arithmetic intensity (model FLOPs per HBM byte, log) against attained FLOP/s
// (log) under the target's roofs, one point per NEFF or per op (a toggle), sized by device
// time. TensorE's compute roof depends on the dtype a kernel's matmuls streamed (FP32 runs at a
// quarter of BF16's rate), so there is one ceiling per dtype in the profile and each point's "of
// roof" is against its own; the table under the chart lists the points with their peak. Kernels without TensorE FLOPs (element-wise, reductions) cannot sit on it: they are a strip
// below, placed by the share of HBM bandwidth they attain. Clicking a point opens its NEFF's device
// trace. Plain SVG, no library.

import { colorFor } from "../colors.js";
import { el, fmtCount, fmtPct, fmtTime } from "../format.js";
import { DataTable } from "./table.js";

const NS = "http://www.w3.org/2000/svg";
const W = 760;
const H = 360;
const M = { left: 64, right: 18, top: 14, bottom: 40 };
const STRIP_H = 90;
const LABELLED = 6; // the costliest points carry their name

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

const si = (v, unit) => {
  const steps = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""]];
  for (const [f, p] of steps) if (Math.abs(v) >= f) return `${+(v / f).toPrecision(3)} ${p}${unit}`;
  return `${+v.toPrecision(3)} ${unit}`;
};

export function rooflineChart(r, { onOpen } = {}) {
  let kind = "neff";
  const host = el("div.roofline-chart");
  const toggle = el("div.roofline-toggle", {},
    ["neff", "op"].map((k) => el(`button.small${k === kind ? ".active" : ""}`, { "data-kind": k, onclick: (e) => {
      kind = k;
      for (const b of toggle.querySelectorAll("button")) b.classList.toggle("active", b.dataset.kind === k);
      draw();
    } }, k === "neff" ? "per NEFF" : "per op")));
  const peaks = roofsOf(r);
  const caption = el("p.muted.roofline-caption", {},
    `${r.target || "target unknown"}: TensorE peak ${peaks.map((k) => `${k.dtype} ${si(k.flops_per_s, "FLOP/s")} (ridge ${k.ridge.toFixed(0)} FLOP/B)`).join(", ")}, `
    + `HBM ${si(r.hbm_bytes_per_s, "B/s")} per NeuronCore (roofs ${r.roofs_from === "ntff" ? "read off the NTFFs" : "from the target's spec"}). `
    + "Each point is held to the peak of the dtype its matmuls streamed. Point area = device time; click a point for its NEFF's device trace.");
  const tableHost = el("div.table-wrap.roofline-table-wrap");
  const draw = () => {
    const points = kind === "neff" ? r.neffs : r.ops;
    host.replaceChildren(chart(r, points, onOpen));
    tableHost.replaceChildren(pointTable(points, onOpen));
  };
  draw();
  return el("div.roofline", {}, toggle, host, caption, tableHost);
}

// the compute ceilings: the roofline's per-dtype peaks (older payloads: the one BF16 peak)
function roofsOf(r) {
  const peaks = r.peaks && r.peaks.length ? r.peaks : [{ dtype: "BF16", flops_per_s: r.peak_flops_per_s, ridge: r.ridge }];
  return [...peaks].sort((a, b) => b.flops_per_s - a.flops_per_s);
}

const peakText = (p) => (p.peak_dtype ? `${p.peak_dtype} ${si(p.peak_flops_per_s, "FLOP/s")}` : "–");

function pointTable(points, onOpen) {
  const table = new DataTable({
    columns: [
      { key: "name", title: "NEFF / op" },
      { key: "executions", title: "Calls", align: "right", format: fmtCount },
      { key: "time_ns", title: "Time", align: "right", format: fmtTime },
      { key: "intensity", title: "FLOP/B", align: "right", format: (v, p) => (p.flops > 0 ? v.toFixed(1) : "–") },
      { key: "flops_per_s", title: "Attained", align: "right", format: (v, p) => (p.flops > 0 ? si(v, "FLOP/s") : "–") },
      { key: "peak_flops_per_s", title: "Peak (dtype)", format: (v, p) => peakText(p) },
      { key: "ridge", title: "Ridge", align: "right", format: (v, p) => (p.flops > 0 ? `${v.toFixed(0)} FLOP/B` : "–") },
      { key: "of_roof", title: "Of roof", align: "right", format: (v) => (v === null || v === undefined ? "–" : fmtPct(v)) },
      { key: "bandwidth_share", title: "HBM", align: "right", format: (v, p) => `${si(p.bytes_per_s, "B/s")} (${fmtPct(v)})` },
      { key: "bound", title: "Bound" },
    ],
    rows: points, sortKey: "time_ns", className: "roofline-table",
    onRowClick: (p) => onOpen && onOpen(p),
  });
  return table.node;
}

function chart(r, points, onOpen) {
  const withFlops = points.filter((p) => p.flops > 0);
  const without = points.filter((p) => !(p.flops > 0));
  const roofs = roofsOf(r);
  const xs = withFlops.map((p) => p.intensity).concat(roofs.map((k) => k.ridge));
  const ys = withFlops.map((p) => p.flops_per_s).concat(roofs.map((k) => k.flops_per_s));
  const x0 = Math.pow(10, Math.floor(Math.log10(Math.max(Math.min(...xs) / 3, 1e-3))));
  const x1 = Math.pow(10, Math.ceil(Math.log10(Math.max(...xs) * 3)));
  const y1 = Math.pow(10, Math.ceil(Math.log10(r.peak_flops_per_s * 1.5)));
  const y0 = Math.pow(10, Math.floor(Math.log10(Math.max(Math.min(...ys, r.hbm_bytes_per_s * x0) / 3, 1))));
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const X = (v) => M.left + ((Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0))) * pw;
  const Y = (v) => M.top + ph - ((Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0))) * ph;
  const total = Math.max(...points.map((p) => p.time_ns), 1);
  const radius = (p) => 3 + 9 * Math.sqrt(p.time_ns / total);
  const root = svg("svg", { class: "roofline-svg", viewBox: `0 0 ${W} ${H + (without.length ? STRIP_H : 0)}`, role: "img",
    "aria-label": "Roofline chart" });
  // grid and axes
  for (let d = Math.log10(x0); d <= Math.log10(x1) + 1e-9; d++) {
    const x = X(10 ** d);
    root.append(svg("line", { class: "grid", x1: x, x2: x, y1: M.top, y2: M.top + ph }),
      svg("text", { class: "tick", x, y: M.top + ph + 14, "text-anchor": "middle" }, si(10 ** d, "")));
  }
  for (let d = Math.log10(y0); d <= Math.log10(y1) + 1e-9; d++) {
    const y = Y(10 ** d);
    root.append(svg("line", { class: "grid", x1: M.left, x2: M.left + pw, y1: y, y2: y }),
      svg("text", { class: "tick", x: M.left - 6, y: y + 3, "text-anchor": "end" }, si(10 ** d, "")));
  }
  root.append(svg("text", { class: "axis", x: M.left + pw / 2, y: H - 6, "text-anchor": "middle" }, "arithmetic intensity (model FLOPs per HBM byte)"),
    svg("text", { class: "axis", x: 12, y: M.top + ph / 2, transform: `rotate(-90 12 ${M.top + ph / 2})`, "text-anchor": "middle" }, "attained FLOP/s"));
  // the roofs: bandwidth slope up to each dtype's ridge, then that dtype's compute ceiling
  const start = Math.max(x0, y0 / r.hbm_bytes_per_s);
  root.append(svg("text", { class: "roof-label", x: X(start) + 6, y: Y(start * r.hbm_bytes_per_s) - 6 }, `HBM ${si(r.hbm_bytes_per_s, "B/s")}`));
  roofsOf(r).forEach((k, i) => {
    const ridge = k.ridge;
    root.append(svg("polyline", { class: i ? "roof roof-lower" : "roof", "data-dtype": k.dtype,
      points: `${X(start)},${Y(start * r.hbm_bytes_per_s)} ${X(ridge)},${Y(k.flops_per_s)} ${X(x1)},${Y(k.flops_per_s)}` }),
    svg("text", { class: "roof-label", x: X(x1) - 4, y: Y(k.flops_per_s) - 5, "text-anchor": "end" }, `${k.dtype} compute ${si(k.flops_per_s, "FLOP/s")}`),
    svg("line", { class: "ridge", x1: X(ridge), x2: X(ridge), y1: Y(k.flops_per_s), y2: M.top + ph }));
  });
  const dot = (p, cx, cy) => {
    const c = svg("circle", { class: "point", cx, cy, r: radius(p), fill: colorFor(p.kind === "op" ? p.name : (p.ops[0] || p.name)),
      "data-name": p.name, "data-neff": p.neff_id, tabindex: "0" },
      svg("title", {}, `${p.name}${p.kind === "neff" && p.ops.length ? ` (${p.ops.join(", ")})` : ""}\n`
        + `${fmtCount(p.executions)} call(s), ${fmtTime(p.time_ns)}\n`
        + (p.flops > 0 ? `${p.intensity.toFixed(1)} FLOP/B, ${si(p.flops_per_s, "FLOP/s")} = ${fmtPct(p.of_roof)} of its roof (${p.bound}-bound under the ${peakText(p)} peak)\n` : "no TensorE FLOPs\n")
        + `HBM ${si(p.bytes_per_s, "B/s")} = ${fmtPct(p.bandwidth_share)} of the bandwidth roof`));
    c.addEventListener("click", () => onOpen && onOpen(p));
    c.addEventListener("keydown", (e) => { if (e.key === "Enter") onOpen && onOpen(p); });
    return c;
  };
  const costliest = new Set([...points].sort((a, b) => b.time_ns - a.time_ns).slice(0, LABELLED));
  const label = (p, cx, cy, below = false) => (costliest.has(p)
    ? svg("text", { class: "point-label", x: cx + radius(p) + 3, y: below ? cy + radius(p) + 10 : cy + 3 }, short(p.name)) : null);
  // largest first, so small points stay clickable on top
  for (const p of [...withFlops].sort((a, b) => b.time_ns - a.time_ns)) {
    const cx = X(p.intensity);
    const cy = Y(Math.max(p.flops_per_s, y0));
    root.append(dot(p, cx, cy), label(p, cx, cy));
  }
  if (without.length) {
    const top = H + 10;
    const y = top + 34;
    const S = (share) => M.left + Math.min(Math.max(share, 0), 1) * pw;
    root.append(svg("text", { class: "axis", x: M.left, y: top + 2 }, "no TensorE FLOPs: share of the HBM bandwidth roof attained"),
      svg("line", { class: "strip", x1: M.left, x2: M.left + pw, y1: y, y2: y }),
      [0, 0.25, 0.5, 0.75, 1].map((v) => svg("text", { class: "tick", x: S(v), y: y + 30, "text-anchor": "middle" }, `${v * 100}%`)));
    let flip = false;
    for (const p of [...without].sort((a, b) => b.time_ns - a.time_ns)) {
      root.append(dot(p, S(p.bandwidth_share), y));
      if (costliest.has(p)) {
        flip = !flip; // alternate above and below the line, so neighbours' names do not overlap
        root.append(svg("text", { class: "point-label", x: S(p.bandwidth_share) + 4, y: flip ? y - radius(p) - 2 : y + radius(p) + 10 }, short(p.name)));
      }
    }
  }
  return root;
}

function short(name) {
  return name.length > 28 ? `${name.slice(0, 27)}…` : name;
}
