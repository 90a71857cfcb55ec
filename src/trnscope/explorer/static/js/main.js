// Entry point: a hash router over the views, and the top navigation.
//
//   #/                                   profiles
//   #/p/<id>/system?t0=&t1=&row=         system trace (window and selection in the URL)
//   #/p/<id>/ops                         operator table
//   #/p/<id>/summary                     summary and recommendations
//   #/p/<id>/device/<neff>/<nc>?seq=     device trace of one NEFF on one NeuronCore
//   #/compare/<base>/<test>              compare two profiles

import { el, fill } from "./format.js";
import { entries, entryById, KIND_LABEL } from "./store.js";
import { profilesView } from "./views/profiles.js";
import { systemView } from "./views/system.js";
import { deviceView } from "./views/device.js";
import { opsView } from "./views/ops.js";
import { summaryView } from "./views/summary.js";
import { compareView } from "./views/compare.js";
import { errorPanel } from "./views/common.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
let current = null;
let generation = 0;

function parseHash() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, query: Object.fromEntries(new URLSearchParams(query || "")) };
}

async function route() {
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
      // the entry's name arrives with the listing; the view does not wait for it
      entries().then(() => { if (mine === generation) renderNav(page, id, parts); }, () => null);
      document.body.dataset.page = page;
      if (page === "system") result = await systemView(main, { id, query });
      else if (page === "ops") result = await opsView(main, { id });
      else if (page === "summary") result = await summaryView(main, { id });
      else if (page === "device") result = await deviceView(main, { id, neff: parts[3], nc: parts[4], query });
      else throw new Error(`unknown page ${page}`);
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
  const items = [link("#/", "Profiles", page === "profiles"), link("#/compare", "Compare", page === "compare")];
  if (id) {
    const entry = entryById(id);
    items.push(el("span.sep", {}, "›"),
      el("span.current", { title: entry ? entry.relpath : id }, entry ? entry.name : id),
      entry ? el("span.badge.small", { "data-kind": entry.kind }, KIND_LABEL[entry.kind] || entry.kind) : null,
      link(`#/p/${id}/system`, "System trace", page === "system"),
      link(`#/p/${id}/ops`, "Operators", page === "ops"),
      link(`#/p/${id}/summary`, "Summary", page === "summary"));
    if (page === "device") items.push(link(location.hash, `Device trace · NC ${parts[4]}`, true));
  }
  fill(nav, ...items);
}

window.addEventListener("hashchange", route);
route();
