// Profiles: every profile directory and trace under the served folders, one summary card each.
// Cards load their figures one or two at a time (opening a trace is the expensive step); very
// large traces wait for a click. Ticking two cards enables Compare.

import { api } from "../api.js";
import { el, fmtBytes, fmtPct, fmtPercentValue, fmtTime, fmtCount, fill, mfuLabel } from "../format.js";
import { entries, KIND_LABEL } from "../store.js";
import { errorPanel, go, loading } from "./common.js";

const AUTO_LOAD_BYTES = 64 * 2 ** 20;
const PARALLEL_CARDS = 2;

export async function profilesView(main) {
  fill(main, loading("Looking for profiles…"));
  let listing;
  try {
    listing = await entries(true);
  } catch (err) {
    fill(main, errorPanel(err, { title: "The explorer server did not answer" }));
    return {};
  }
  const chosen = [];
  const compareButton = el("button.primary", { disabled: true, onclick: () => go(`#/compare/${chosen[0]}/${chosen[1]}`) },
    "Compare selected");
  const compareHint = el("span.muted", {}, "Tick two profiles to compare them");
  const header = el("div.page-head", {},
    el("div", {}, el("h1", {}, "Profiles"),
      el("p.muted", {}, `${listing.entries.length} found under ${listing.roots.join(", ")}`
        + (listing.truncated ? " (listing truncated)" : ""))),
    el("div.toolbar", {}, compareHint, compareButton));
  const grid = el("div.cards");
  fill(main, header, grid);
  if (!listing.entries.length) {
    grid.append(el("div.empty", {}, "No profiles or traces here. Record one with NeuronProfiler, or pass a folder "
      + "holding torch.profiler traces (.json / .json.gz)."));
  }
  const onToggle = (id, checked) => {
    const at = chosen.indexOf(id);
    if (checked && at < 0) chosen.push(id);
    if (!checked && at >= 0) chosen.splice(at, 1);
    while (chosen.length > 2) {
      const dropped = chosen.shift();
      const box = grid.querySelector(`input[data-id="${dropped}"]`);
      if (box) box.checked = false;
    }
    compareButton.disabled = chosen.length !== 2;
    compareHint.textContent = chosen.length === 2 ? "Base = first ticked, test = second" : "Tick two profiles to compare them";
  };
  const queue = [];
  for (const entry of listing.entries) {
    const card = entryCard(entry, onToggle);
    grid.append(card.node);
    if (!entry.error && entry.size <= AUTO_LOAD_BYTES) queue.push(card);
  }
  let stopped = false;
  const worker = async () => {
    while (queue.length && !stopped) await queue.shift().load();
  };
  for (let i = 0; i < PARALLEL_CARDS; i++) worker();
  return { destroy() { stopped = true; } };
}

function entryCard(entry, onToggle) {
  const body = el("div.card-body");
  const node = el("article.card", { "data-id": entry.id, "data-kind": entry.kind },
    el("header", {},
      el("span.badge", { "data-kind": entry.kind }, KIND_LABEL[entry.kind] || entry.kind),
      el("label.compare-pick", { title: "Select for comparison" },
        el("input", { type: "checkbox", "data-id": entry.id, onchange: (e) => onToggle(entry.id, e.target.checked) }),
        " compare")),
    el("h2", { title: entry.relpath }, entry.name),
    el("p.muted.path", {}, `${entry.relpath} · ${fmtBytes(entry.size)} · ${new Date(entry.mtime * 1000).toLocaleString()}`),
    body,
    el("footer", {},
      el("a.button", { href: `#/p/${entry.id}/system` }, "System trace"),
      el("a.button", { href: `#/p/${entry.id}/ops` }, "Operators"),
      el("a.button", { href: `#/p/${entry.id}/summary` }, "Summary")));
  const problems = (entry.manifest && entry.manifest.problems) || [];
  if (entry.error) {
    showError(node, body, entry.error);
  } else if (entry.size > AUTO_LOAD_BYTES) {
    body.append(el("p.muted", {}, `Large trace (${fmtBytes(entry.size)}): figures load when you open it.`),
      el("button", { onclick: () => card.load() }, "Load summary"));
  } else {
    body.append(el("p.muted", {}, "…"));
  }
  if (problems.length) node.append(el("ul.warnings", {}, problems.slice(0, 3).map((p) => el("li", {}, p))));
  const card = {
    node,
    async load() {
      fill(body, loading("Reading…"));
      try {
        const data = await api.card(entry.id);
        fill(body, cardFigures(data));
      } catch (err) {
        showError(node, body, { problem: err.message, hint: err.hint, file: err.file });
      }
    },
  };
  return card;
}

function showError(node, body, error) {
  node.classList.add("error");
  fill(body, el("p.problem", {}, `Cannot open: ${error.problem}`),
    error.hint ? el("p.hint", {}, error.hint) : null);
}

const HOST_TIME = {
  real: ["host time measured", "Your Python and PyTorch's dispatcher as measured on the recording machine; the Neuron backend's host costs from trnscope's model"],
  modelled: ["host time modelled", "Every host interval from trnscope's host-cost model: the same on any machine"],
  mixed: ["host time mixed", "The host-time mode changed while this profile recorded"],
};

// The target the profile emulated and how its host times were made (trn1 and trn2 profiles of the
// same script look alike otherwise).
function recordingLine(h) {
  const [label, tip] = HOST_TIME[h.host_time] || ["host time unknown", "Recorded before trnscope wrote host-time modes"];
  return el("p.recording.muted", {},
    el("span.target", { title: "Emulated target" }, h.target || "target unknown"),
    h.retimed_from ? el("span.retimed", { title: "A trnscope retime copy: device times re-simulated, host intervals as recorded" },
      ` (retimed from ${h.retimed_from})`) : null, " · ",
    el("span.host-time", { title: tip }, label));
}

function cardFigures(data) {
  const h = data.headline;
  const figure = (label, value, tip) => el("div.figure", { title: tip || "" }, el("span.value", {}, value), el("span.label", {}, label));
  if (!h.device_lanes) {
    // a CPU-only trace: host figures instead of a row of zeros
    return el("div", {},
      el("div.figures", {},
        figure("wall time", fmtTime(h.wall_ns), "First to last event of the trace"),
        figure("host CPU (self)", fmtTime(h.cpu_self_ns)),
        figure("threads", fmtCount(h.host_threads)),
        figure("events", fmtCount(h.events))),
      el("p.muted", {}, "CPU-only trace: no device lanes"),
      h.top_op ? el("p.muted", {}, `Top op: ${h.top_op.name} (${fmtTime(h.top_op.cpu_total_ns)} CPU)`) : null,
      (data.warnings || []).map((w) => el("p.warning", {}, w)));
  }
  const figures = [
    figure("wall time", fmtTime(h.wall_ns), "First to last event of the trace"),
    figure("device time", fmtTime(h.device_time_ns), "Sum of device executions (kernels, NEFFs, copies)"),
    figure(data.kind === "neuron" ? "NEFF dispatches" : "kernel launches", fmtCount(h.dispatches)),
    figure(data.kind === "neuron" ? "distinct NEFFs" : "distinct kernels", fmtCount(h.programs)),
    figure("device busy", h.busy_share === null ? "–" : fmtPct(h.busy_share), "Any stream running, over the device's span from first to last execution (HTA's temporal breakdown)"),
  ];
  if (h.mbu_percent !== null && h.mbu_percent !== undefined) figures.push(figure("MBU", fmtPercentValue(h.mbu_percent)));
  if (h.mfu_percent !== null && h.mfu_percent !== undefined) {
    // which peak: each kernel's dtype peak (FP32 runs at a quarter of BF16's rate)
    figures.push(figure(mfuLabel(h), fmtPercentValue(h.mfu_percent), h.mfu_text || "Model FLOPs over TensorE peak"));
  }
  const parts = [el("div.figures", {}, figures)];
  if (h.executions) parts.push(el("p.regime", {}, el("b", {}, h.regime)));
  if (data.kind === "neuron") parts.push(recordingLine(h));
  if (h.top_op) parts.push(el("p.muted", {}, `Top op: ${h.top_op.name} (${fmtTime(h.top_op.device_self_ns)} device, ${fmtTime(h.top_op.cpu_total_ns)} CPU)`));
  const rec = data.recommendations[0];
  if (rec) parts.push(el("p.rec", {}, el("span.sev", { "data-sev": rec.severity }, rec.severity), " ", rec.title));
  for (const w of data.warnings || []) parts.push(el("p.warning", {}, w));
  return el("div", {}, parts);
}

export default profilesView;
