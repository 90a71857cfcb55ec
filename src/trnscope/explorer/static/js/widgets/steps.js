// Per-step overview: one stacked column per profiler step (device busy, waiting for host dispatch,
// launch latency, idle), as the TensorBoard plugin's overview showed; a click opens the step in
// the system trace. Column height is the step's duration, on one scale for all steps.

import { el, fmtPct, fmtTime } from "../format.js";

const NS = "http://www.w3.org/2000/svg";
const PARTS = [["busy_ns", "busy", "device busy"], ["host_dispatch_ns", "host", "waiting for host dispatch"],
  ["launch_ns", "launch", "launch latency"], ["idle_ns", "unknown", "idle (dependency, unknown)"]];

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

export function stepOverview(steps, { onOpen } = {}) {
  const H = 180;
  const top = 10;
  const left = 56;
  const barW = Math.max(8, Math.min(44, Math.floor(760 / Math.max(steps.length, 1)) - 6));
  const W = left + steps.length * (barW + 6) + 10;
  const max = Math.max(...steps.map((s) => s.dur_ns), 1);
  const root = svg("svg", { class: "steps-svg", viewBox: `0 0 ${W} ${H + 36}`, width: W, height: H + 36, role: "img",
    "aria-label": "Per-step overview" });
  for (const f of [0, 0.5, 1]) {
    const y = top + H - f * H;
    root.append(svg("line", { class: "grid", x1: left - 4, x2: W, y1: y, y2: y }),
      svg("text", { class: "tick", x: left - 8, y: y + 3, "text-anchor": "end" }, fmtTime(f * max)));
  }
  steps.forEach((step, i) => {
    const x = left + i * (barW + 6);
    const g = svg("g", { class: "step-bar", "data-step": step.name, tabindex: "0" });
    let y = top + H;
    for (const [key, cls] of PARTS) {
      const h = (step[key] / max) * H;
      y -= h;
      if (h > 0) g.append(svg("rect", { class: `seg-${cls}`, x, y, width: barW, height: h }));
    }
    g.append(svg("rect", { class: "step-hit", x, y: top, width: barW, height: H }),
      svg("title", {}, `${step.name}: ${fmtTime(step.dur_ns)}, ${step.executions} execution(s)\n`
        + PARTS.map(([key, , label]) => `${label} ${fmtTime(step[key])} (${fmtPct(step[key] / Math.max(step.dur_ns, 1))})`).join("\n")));
    g.append(svg("text", { class: "tick", x: x + barW / 2, y: top + H + 14, "text-anchor": "middle" }, `#${step.number}`));
    g.addEventListener("click", () => onOpen && onOpen(step));
    g.addEventListener("keydown", (e) => { if (e.key === "Enter") onOpen && onOpen(step); });
    root.append(g);
  });
  const legend = el("div.legend", {}, PARTS.map(([, cls, label]) => el("span.key", {}, el(`span.dot.${cls}`), label)));
  return el("div.steps", {}, el("div.steps-scroll", {}, root), legend,
    el("p.muted", {}, "One column per profiler step (ProfilerStep#N); click one to open it in the system trace."));
}
