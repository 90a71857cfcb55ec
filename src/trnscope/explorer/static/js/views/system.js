// System trace: the profile's lanes on one time axis, with details, dependency chains and range
// selection below. The URL keeps the time window and the selected slice, so a view can be shared.

import { api } from "../api.js";
import { el, fill } from "../format.js";
import { Timeline } from "../timeline/timeline.js";
import { renderDetails, renderSelection } from "../widgets/details.js";
import { flagStore, flagsMenu } from "../widgets/flags.js";
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
    urlTimer = setTimeout(() => replaceQuery({ t0: Math.round(timeline.t0), t1: Math.round(timeline.t1), row: state.row,
      mark: query.mark }), 250);
  };
  const { flags, unsubscribe } = attachFlags(id, "system", () => timeline);
  timeline = new Timeline(host, api.source(id), {
    onWindow: syncUrl,
    onFlag: flags.onFlag,
    toolbarExtra: flags.menu.node,
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
    await timeline.init({ t0: num(query.t0), t1: num(query.t1), mark: parseMark(query.mark) });
  } catch (err) {
    unsubscribe();
    timeline.destroy();
    fill(main, errorPanel(err));
    return {};
  }
  flags.ready();
  if (state.row !== null) timeline.select(state.row);
  else if (timeline.range) timeline.finishRange(); // a marked range (an idle gap from the summary): what ran in it
  enableSplitter(page);
  return { destroy() { clearTimeout(urlTimer); unsubscribe(); timeline.destroy(); }, timeline };
}

// ``mark=<t0>,<t1>[,<label>]``: a range shown marked when the page opens.
function parseMark(text) {
  if (!text) return undefined;
  const [a, b, ...label] = String(text).split(",");
  const t0 = Number(a);
  const t1 = Number(b);
  if (!Number.isFinite(t0) || !Number.isFinite(t1) || t1 <= t0) return undefined;
  return { t0, t1, label: label.join(",") };
}

// Flags of one view of a profile: the toolbar menu, "⚑ Flag", and the timeline drawing them.
export function attachFlags(id, view, getTimeline) {
  const store = flagStore(id);
  const jump = (flag) => {
    const t = getTimeline();
    const span = t.t1 - t.t0;
    t.setWindow(flag.ts - span / 2, flag.ts + span / 2);
  };
  const menu = flagsMenu(store, view, { onJump: jump });
  let unsubscribe = () => {};
  const flags = {
    menu,
    onFlag: (at) => menu.added(store.add(view, at)),
    ready: () => {
      const draw = () => getTimeline().setFlags(store.of(view));
      unsubscribe = store.subscribe(draw);
      draw();
    },
  };
  return { flags, unsubscribe: () => { unsubscribe(); menu.destroy(); } };
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

export default systemView;
