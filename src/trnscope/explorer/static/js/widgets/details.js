// The details pane under a timeline: one slice (record, args, call stack, dependency chain,
// device-trace links, instruction dependencies) or a time-range selection summary.

import { el, fmtCount, fmtPct, fmtTime } from "../format.js";
import { colorFor } from "../colors.js";

const SOURCE_LABEL = { call: "line", frame: "function", backward: "backward of", "backward call": "backward() call",
  graph: "compiled graph", nki: "NKI kernel" };
const SOURCE_ORIGIN = {
  call: "The line of your code that dispatched it (recorded with with_stack=True)",
  frame: "The Python function of your code around it (Kineto names a frame by its first line)",
  backward: "Autograd's backward of the forward op at this line",
  "backward call": "Backward work with no forward op (gradient accumulation): the line that called backward()",
  graph: "From the FX node's stack trace of the compiled graph",
  nki: "The NKI kernel line that issued this instruction",
};

export function renderDetails(d, { onJump, onDevice } = {}) {
  const jump = (item) => el("a.link", { href: "#", onclick: (e) => { e.preventDefault(); onJump && onJump(item); } }, item.name);
  const parts = [];
  parts.push(el("div.details-head", {},
    el("span.swatch", { style: `background:${colorFor(d.color_key ?? d.name)}` }),
    el("h3", {}, d.name),
    el("span.muted", {}, `${d.cat || ""} · ${d.lane_title}`)));
  const facts = [
    ["Start", fmtTime(d.ts)], ["Duration", fmtTime(d.dur)], ["Lane", d.lane_title], ["Depth", d.depth], ["Row", d.row],
  ];
  if (d.instruction !== undefined) facts.push(["Instruction", d.instruction]);
  // the line of the user's code behind it (analysis.source_lines: how it was found)
  if (d.source) facts.push(["Source line", el("span.source-line", { title: SOURCE_ORIGIN[d.source.origin] || "" },
    d.source.line, el("span.muted", {}, ` · ${SOURCE_LABEL[d.source.origin] || d.source.origin}`))]);
  parts.push(factTable(facts));
  if (d.device_traces && d.device_traces.length) {
    parts.push(el("h4", {}, "Device traces"));
    parts.push(el("div.buttons", {}, d.device_traces.map((link) => el("button.primary.device-link", {
      "data-neff": link.neff_id, "data-nc": String(link.nc),
      onclick: () => onDevice && onDevice(link),
    }, `Open device trace: ${link.name} (NC ${link.nc}${link.seq !== undefined && link.seq !== null ? `, execution ${link.seq}` : ""})`))));
  }
  if (d.waiting_instruction) {
    parts.push(el("h4", {}, "Waiting for"));
    parts.push(el("div", {}, jump(d.waiting_instruction), ` on ${d.waiting_instruction.lane_title}`));
  }
  if (d.stack && d.stack.length) {
    parts.push(el("h4", {}, "Call stack"));
    parts.push(el("div.stack", {}, d.stack.map((s, i) => [i ? " › " : "", jump(s)])));
  }
  if (d.predecessors || d.successors) {
    parts.push(chainTable("Predecessors (this instruction waits on)", d.predecessors || [], jump, true));
    parts.push(chainTable("Successors (wait on this instruction)", d.successors || [], jump, true));
  } else {
    parts.push(chainTable("Upstream", d.upstream || [], jump));
    parts.push(chainTable("Downstream", d.downstream || [], jump));
  }
  parts.push(el("h4", {}, "Arguments"));
  parts.push(argsTable(d.args || {}));
  return el("div.details", {}, parts);
}

function factTable(rows) {
  return el("table.facts", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v ?? "–"))));
}

function chainTable(title, items, jump, dependency = false) {
  const wrap = el("div.chain", {}, el("h4", {}, `${title} (${items.length})`));
  if (!items.length) { wrap.append(el("div.muted", {}, "none")); return wrap; }
  const head = dependency ? ["Instruction", "Engine", "Semaphore", "Start", "Duration"] : ["Event", "Lane", "Op", "Start", "Duration", "Via"];
  wrap.append(el("table.mini", {},
    el("tr", {}, head.map((h) => el("th", {}, h))),
    items.map((item) => el("tr", {},
      dependency
        ? [el("td", {}, jump(item), ` #${item.instruction}`), el("td", {}, item.engine), el("td", {}, `${item.semaphore} ≥ ${item.value}`),
           el("td", {}, fmtTime(item.ts)), el("td", {}, fmtTime(item.dur))]
        : [el("td", {}, jump(item)), el("td", {}, item.lane_title), el("td", {}, item.op ? item.op.name : ""),
           el("td", {}, fmtTime(item.ts)), el("td", {}, fmtTime(item.dur)), el("td.muted", {}, item.flow || "")]))));
  return wrap;
}

function argsTable(args) {
  const keys = Object.keys(args);
  if (!keys.length) return el("div.muted", {}, "none");
  return el("table.facts.args", {}, keys.map((k) => {
    const v = args[k];
    const shown = typeof v === "object" && v !== null ? JSON.stringify(v) : String(v);
    return el("tr", {}, el("th", {}, k), el("td", {}, el("code", {}, shown)));
  }));
}

export function renderSelection(sel) {
  // self time (nested slices' time left to them), so the shares add up to 100%
  const names = sel.names.map((n) => el("tr", {},
    el("td", {}, el("span.swatch", { style: `background:${colorFor(n.name)}` }), n.name),
    el("td.right", {}, fmtCount(n.count)), el("td.right", {}, fmtTime(n.self_ns ?? n.time_ns)),
    el("td.right.muted", {}, fmtTime(n.time_ns)),
    el("td.right", {}, fmtPct(n.share ?? n.time_ns / sel.duration_ns))));
  const lanes = sel.lanes.filter((l) => l.slices).map((l) => el("tr", {},
    el("td", {}, l.title), el("td.right", {}, fmtCount(l.slices)), el("td.right", {}, fmtTime(l.busy_ns)),
    el("td.right", {}, fmtPct(l.busy_share))));
  return el("div.details.selection", {},
    el("div.details-head", {}, el("h3", {}, `Selection: ${fmtTime(sel.duration_ns)}`),
      el("span.muted", {}, `${fmtTime(sel.t0)} – ${fmtTime(sel.t1)} · ${fmtCount(sel.slices)} slices · Esc clears`)),
    el("div.two-col", {},
      el("div", {}, el("h4", {}, "By name (self time inside the selection; shares of all names' self time)"),
        el("table.mini.by-name", {}, el("tr", {}, ["Name", "Count", "Self", "With nested", "Share"].map((h) => el("th", {}, h))), names)),
      el("div", {}, el("h4", {}, "By lane (top-level busy time)"),
        el("table.mini", {}, el("tr", {}, ["Lane", "Slices", "Busy", "Busy %"].map((h) => el("th", {}, h))), lanes))));
}

