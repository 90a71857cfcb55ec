// The explorer's JSON API; timeline answers come as binary columns (timeline/columns.js). Errors
// come back as {error: {problem, hint, file}}; they are thrown as ApiError so views can show the
// problem and the hint instead of a stack trace.

import { fetchColumns, readColumns } from "./timeline/columns.js";

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.problem || `request failed (${status})`);
    this.status = status;
    this.hint = error.hint || "";
    this.file = error.file || "";
  }
}

export async function getJSON(url, { signal } = {}) {
  let response;
  try {
    response = await fetch(url, { signal, headers: { accept: "application/json" } });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, { error: { problem: "the explorer server cannot be reached", hint: "Is `trnscope view` still running?" } });
  }
  let body = null;
  try { body = await response.json(); } catch { body = null; }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

const enc = encodeURIComponent;

// one definition of a timeline page's API route: boot.js's, from the page list it was given
function timelineBase(id, pageName, params) {
  const pages = window.__trnscopePages;
  const page = pages && pages.list.find((p) => p.scope === "entry" && (pageName ? p.name === pageName : p.home));
  if (!page || page.timeline === null) throw new Error(`no timeline page ${pageName || "(home)"}`);
  return pages.timelineBase(page, id, params);
}

async function columns(url, response = null) {
  let answer;
  try {
    answer = await (response ? response.then(readColumns) : fetchColumns(url));
  } catch (err) {
    throw new ApiError(0, { error: { problem: "the explorer server cannot be reached", hint: "Is `trnscope view` still running?" } });
  }
  if (!answer.ok) throw new ApiError(answer.status, answer.data);
  return answer.data;
}

// The request index.html's boot script started for this timeline, if any (used once).
function bootLayout(base) {
  const boot = window.__trnscopeBoot;
  if (!boot || boot.base !== base) return null;
  window.__trnscopeBoot = null;
  return boot.response;
}

// Level-of-detail answers are fetched and decoded by a worker (see timeline/lodworker.js); the
// main-thread fetch is the fallback where module workers are unavailable.
let worker = null;
let nextId = 0;
const waiting = new Map();

function lodWorker() {
  if (worker === null) {
    try {
      worker = new Worker(new URL("./timeline/lodworker.js", import.meta.url), { type: "module" });
      worker.onmessage = (event) => {
        const { id, ok, data, status, body } = event.data;
        const pending = waiting.get(id);
        if (!pending) return;
        waiting.delete(id);
        if (ok) pending.resolve(data);
        else pending.reject(new ApiError(status, body));
      };
    } catch {
      worker = false;
    }
  }
  return worker;
}

function getDecoded(url) {
  const w = lodWorker();
  if (!w) return columns(url);
  return new Promise((resolve, reject) => {
    const id = ++nextId;
    waiting.set(id, { resolve, reject });
    w.postMessage({ id, url: new URL(url, location.href).href });
  });
}

export const api = {
  entries: () => getJSON("/api/entries"),
  card: (id) => getJSON(`/api/entries/${enc(id)}/card`),
  summary: (id) => getJSON(`/api/entries/${enc(id)}/summary`),
  ops: (id) => getJSON(`/api/entries/${enc(id)}/ops`),
  compare: (base, test) => getJSON(`/api/compare?base=${enc(base)}&test=${enc(test)}`),
  // A timeline source: the timeline of an entry page (explorer/pages; the home page, the system
  // trace, by default) with the page's URL parameters, e.g. source(id, "device", {neff, nc}).
  source(id, pageName = null, params = {}) {
    const base = timelineBase(id, pageName, params);
    return {
      // px: also answer the level of detail of the whole trace at that width (saves a round trip).
      // Usually already asked for by the boot script (at about that width: the timeline asks
      // again if it is off by more than 1.5x). Fetched on the main thread: decoding binary columns
      // costs nothing.
      layout: (px) => {
        const early = px ? bootLayout(base) : null;
        return early ? columns(null, early) : px ? columns(`${base}/timeline?px=${px}`) : getJSON(`${base}/timeline`);
      },
      // after the first paint: start the worker that fetches the level of detail from then on
      prepare: () => { lodWorker(); },
      lod: (t0, t1, px, lanes) =>
        getDecoded(`${base}/lod?t0=${t0}&t1=${t1}&px=${px}${lanes ? `&lanes=${lanes.join(",")}` : ""}`),
      details: (row) => getJSON(`${base}/slice/${row}`),
      select: (t0, t1, lanes) => getJSON(`${base}/select?t0=${t0}&t1=${t1}${lanes ? `&lanes=${lanes.join(",")}` : ""}`),
      search: (text, regex, lanes) =>
        getJSON(`${base}/search?q=${enc(text)}${regex ? "&regex=1" : ""}${lanes ? `&lanes=${lanes.join(",")}` : ""}`),
    };
  },
  notes: (id) => getJSON(`/api/entries/${enc(id)}/notes`),
  roofline: (id) => getJSON(`/api/entries/${enc(id)}/roofline`),
  query: (id, sql) => getJSON(`/api/entries/${enc(id)}/query?sql=${enc(sql)}`),
  queryTables: (id) => getJSON(`/api/entries/${enc(id)}/query/tables`),
  saveNotes: (id, doc) => sendJSON(`/api/entries/${enc(id)}/notes`, doc, "PUT"),
};

export async function sendJSON(url, doc, method = "POST") {
  let response;
  try {
    response = await fetch(url, { method, body: JSON.stringify(doc),
      headers: { "content-type": "application/json", accept: "application/json" } });
  } catch {
    throw new ApiError(0, { error: { problem: "the explorer server cannot be reached", hint: "Is `trnscope view` still running?" } });
  }
  let body = null;
  try { body = await response.json(); } catch { body = null; }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}
