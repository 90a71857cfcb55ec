// System trace: the profile's lanes on one time axis, with details, dependency chains and range
// selection below. The URL keeps the time window and the selected slice, so a view can be shared.

import { api } from "../api.js";
import { el, fill } from "../format.js";
import { Timeline } from "../timeline/timeline.js";
import { renderDetails, renderSelection } from "../widgets/details.js";
import { deviceHash, errorPanel, go, replaceQuery } from "./common.js";

export async function systemView(main, { id, query }) {
  const pane = el("div.details-pane.idle", {}, el("p.muted", {}, "Click a slice for its details and dependency chain; "
    + "shift+drag to summarise a time range."));
  const host = el("div.timeline-host");
  const page = el("div.trace-page", {}, host, el("div.splitter"), pane);
  fill(main, page);
  let timeline = null;
  let urlTimer = null;
  const state = { row: query.row ? Number(query.row) : null };
  const syncUrl = () => {
    clearTimeout(urlTimer);
    urlTimer = setTimeout(() => replaceQuery({ t0: Math.round(timeline.t0), t1: Math.round(timeline.t1), row: state.row }), 250);
  };
  timeline = new Timeline(host, api.source(id), {
    onWindow: syncUrl,
    onSelect: (details) => {
      state.row = details ? details.row : null;
      syncUrl();
      showInPane(pane, details ? renderDetails(details, {
        onJump: (item) => timeline.focus(item),
        onDevice: (link) => go(deviceHash(id, link)),
      }) : null);
    },
    onRange: (summary) => { if (summary) showInPane(pane, renderSelection(summary)); },
    onError: (err) => showInPane(pane, errorPanel(err, { title: "Request failed" })),
  });
  try {
    await timeline.init({ t0: num(query.t0), t1: num(query.t1) });
  } catch (err) {
    timeline.destroy();
    fill(main, errorPanel(err));
    return {};
  }
  if (state.row !== null) timeline.select(state.row);
  enableSplitter(page);
  return { destroy() { clearTimeout(urlTimer); timeline.destroy(); }, timeline };
}

function num(value) {
  if (value === undefined || value === null || value === "") return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : undefined;
}

// The pane under a timeline: compact while it only holds a hint, its full height with content.
export function showInPane(pane, content) {
  pane.classList.toggle("idle", !content);
  fill(pane, content || el("p.muted", {}, "Nothing selected."));
}

export function enableSplitter(page) {
  const splitter = page.querySelector(".splitter");
  const pane = page.querySelector(".details-pane");
  if (!splitter || !pane) return;
  splitter.addEventListener("mousedown", (e) => {
    e.preventDefault();
    const startY = e.clientY;
    const start = pane.getBoundingClientRect().height;
    pane.classList.remove("idle"); // a height the user drags to is kept
    const move = (ev) => { pane.style.height = `${Math.max(80, start - (ev.clientY - startY))}px`; };
    const up = () => { window.removeEventListener("mousemove", move); window.removeEventListener("mouseup", up); };
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
  });
}
