// Pieces shared by the views: error panels, page headers, navigation helpers.

import { el } from "../format.js";

export function errorPanel(err, { title = "This profile cannot be opened" } = {}) {
  return el("div.error-panel", { role: "alert" },
    el("h2", {}, title),
    el("p.problem", {}, err.message || String(err)),
    err.hint ? el("p.hint", {}, err.hint) : null,
    err.file ? el("p.muted", {}, `File: ${err.file}`) : null,
    el("p", {}, el("a.link", { href: "#/" }, "← Back to all profiles")));
}

export function go(hash) {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = hash;
}

export function replaceQuery(params) {
  const [path] = location.hash.split("?");
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined) query.set(k, v);
  const text = query.toString();
  history.replaceState(null, "", `${path}${text ? "?" + text : ""}`);
}

export function loading(text = "Loading…") {
  return el("div.loading", {}, el("span.spinner"), text);
}

export function deviceHash(id, link) {
  const seq = link.seq !== undefined && link.seq !== null ? `?seq=${link.seq}` : "";
  return `#/p/${id}/device/${link.neff_id}/${link.nc}${seq}`;
}

// ``item.mark``: a label; the item's interval is then shown marked (an idle gap from the summary).
export function systemHash(id, item) {
  const dur = Math.max(item.dur || 0, 1);
  const pad = Math.max(dur * 1.5, 500);
  const mark = item.mark ? `&mark=${Math.round(item.ts)},${Math.round(item.ts + dur)},${encodeURIComponent(item.mark)}` : "";
  return `#/p/${id}/system?t0=${Math.floor(item.ts - pad)}&t1=${Math.ceil(item.ts + dur + pad)}${item.row !== undefined ? `&row=${item.row}` : ""}${mark}`;
}

// A call framed with its context: the slice and everything its flows lead to (its runtime call,
// the queue, the device execution), with a quarter of that span each side, so the kernel a host op
// launched is on screen too (framing the op alone left it off to the right).
export function framedHash(id, details) {
  let a = details.ts;
  let b = details.ts + Math.max(details.dur, 1);
  for (const item of [...(details.downstream || []), ...(details.upstream || [])]) {
    a = Math.min(a, item.ts);
    b = Math.max(b, item.ts + item.dur);
  }
  const pad = Math.max((b - a) * 0.25, 1000);
  return `#/p/${id}/system?t0=${Math.floor(a - pad)}&t1=${Math.ceil(b + pad)}&row=${details.row}`;
}
