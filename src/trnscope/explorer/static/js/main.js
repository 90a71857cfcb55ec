// Entry point: a hash router over the views, and the top navigation.
//
//   #/                                   profiles
//   #/p/<id>/system?t0=&t1=&row=         system trace (window and selection in the URL)
//   #/p/<id>/ops                         operator table
//   #/p/<id>/summary                     summary and recommendations
//   #/p/<id>/query?sql=                  SQL over the profile's tables
//   #/p/<id>/device/<neff>/<nc>?seq=     device trace of one NEFF on one NeuronCore
//   #/compare/<base>/<test>              compare two profiles
//   #/runs, #/run/<id>?c=                multi-rank runs; one run, all ranks (c: a collective)

import { applyTheme, currentTheme, initialTheme } from "./colors.js";
import { el, fill } from "./format.js";
import { entries, entryById, KIND_LABEL } from "./store.js";
import { errorPanel } from "./views/common.js";

// Views load when first shown: a page waits only for its own modules before it asks for data
// (index.html still preloads them all, so switching pages costs no round trip).
const lazy = (load, name) => async (...args) => (await load())[name](...args);
const profilesView = lazy(() => import("./views/profiles.js"), "profilesView");
const systemView = lazy(() => import("./views/system.js"), "systemView");
const deviceView = lazy(() => import("./views/device.js"), "deviceView");
const opsView = lazy(() => import("./views/ops.js"), "opsView");
const summaryView = lazy(() => import("./views/summary.js"), "summaryView");
const compareView = lazy(() => import("./views/compare.js"), "compareView");
const queryView = lazy(() => import("./views/query.js"), "queryView");
const runsView = lazy(() => import("./views/ranks.js"), "runsView");
const ranksView = lazy(() => import("./views/ranks.js"), "ranksView");

performance.mark("trnscope:main"); // the entry module ran (benchmarks read it)

let main = null;
let nav = null;
let current = null;
let generation = 0;

function parseHash() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, query: Object.fromEntries(new URLSearchParams(query || "")) };
}

async function route() {
  themeButton();
  main = document.getElementById("main");
  nav = document.getElementById("nav");
  const mine = ++generation;
  if (current && current.destroy) current.destroy();
  current = null;
  const { parts, query } = parseHash();
  let page = "profiles";
  let id = null;
  let result;
  document.body.dataset.page = "";
  try {
    if (parts[0] === "p" && parts[1]) {
      id = parts[1];
      page = parts[2] || "system";
      renderNav(page, id, parts);
      document.body.dataset.page = page;
      // the entry's name arrives with the listing, asked for once the page is up: the view's own
      // data comes first
      const named = () => entries().then(() => { if (mine === generation) renderNav(page, id, parts); }, () => null);
      try {
        if (page === "system") result = await systemView(main, { id, query });
        else if (page === "ops") result = await opsView(main, { id });
        else if (page === "summary") result = await summaryView(main, { id });
        else if (page === "query") result = await queryView(main, { id, query });
        else if (page === "device") result = await deviceView(main, { id, neff: parts[3], nc: parts[4], query });
        else throw new Error(`unknown page ${page}`);
      } finally {
        named();
      }
    } else if (parts[0] === "run" || parts[0] === "runs") {
      renderNav("runs", null, parts);
      document.body.dataset.page = "run";
      result = parts[1] ? await ranksView(main, { rid: parts[1], query }) : await runsView(main);
    } else if (parts[0] === "compare") {
      renderNav("compare", null, parts);
      document.body.dataset.page = "compare";
      result = await compareView(main, { base: parts[1], test: parts[2] });
    } else {
      renderNav("profiles", null, parts);
      document.body.dataset.page = "profiles";
      result = await profilesView(main);
    }
  } catch (err) {
    fill(main, errorPanel(err, { title: "Something went wrong" }));
  }
  if (mine !== generation) { if (result && result.destroy) result.destroy(); return; }
  current = result || null;
  document.body.dataset.ready = "1";
}

function renderNav(page, id, parts) {
  const link = (href, label, active) => el(`a.tab${active ? ".active" : ""}`, { href }, label);
  const items = [link("#/", "Profiles", page === "profiles"), link("#/compare", "Compare", page === "compare"),
    link("#/runs", "Runs", page === "runs")];
  if (id) {
    const entry = entryById(id);
    items.push(el("span.sep", {}, "›"),
      el("span.current", { title: entry ? entry.relpath : id }, entry ? entry.name : id),
      entry ? el("span.badge.small", { "data-kind": entry.kind }, KIND_LABEL[entry.kind] || entry.kind) : null,
      link(`#/p/${id}/system`, "System trace", page === "system"),
      link(`#/p/${id}/ops`, "Operators", page === "ops"),
      link(`#/p/${id}/summary`, "Summary", page === "summary"),
      link(`#/p/${id}/query`, "SQL", page === "query"));
    if (page === "device") items.push(link(location.hash, `Device trace · NC ${parts[4]}`, true));
  }
  fill(nav, ...items);
}

// Light / dark: a button in the top bar; timelines redraw with the new colours.
function themeButton() {
  const bar = document.querySelector(".topbar");
  if (!bar || bar.querySelector(".theme-toggle")) return;
  const label = () => (currentTheme() === "dark" ? "☀ Light" : "☾ Dark");
  const button = el("button.theme-toggle", { title: "Switch between the light and dark theme", onclick: () => {
    applyTheme(currentTheme() === "dark" ? "light" : "dark");
    button.textContent = label();
    for (const t of (window.__trnscope && window.__trnscope.timelines) || []) t.requestDraw();
  } }, label());
  bar.append(button);
}

if (document.documentElement.dataset.theme !== initialTheme()) document.documentElement.dataset.theme = initialTheme();

window.addEventListener("hashchange", route);
// boot.js adds this module from the head: the body may still be parsing when it runs
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", route, { once: true });
else route();
