// Entry point: a hash router over the explorer's pages, and the top navigation. The pages are
// declared on the server (explorer/pages: one module each) and arrive with index.html
// (boot.js puts them in window.__trnscopePages):
//
//   #/<page>/<params...>                 a global page (#/ is the home page: the profiles)
//   #/p/<id>/<page>/<params...>?query    a page of one profile (#/p/<id> is its home page)
//
// Each page's module (its `script`) loads when first shown (index.html preloads the timeline
// pages' modules); its default export draws it: render(main, {id, query, ...params}).

import { applyTheme, currentTheme, initialTheme } from "./colors.js";
import { el, fill } from "./format.js";
import { entries, entryById, KIND_LABEL } from "./store.js";
import { errorPanel } from "./views/common.js";

performance.mark("trnscope:main"); // the entry module ran (benchmarks read it)

const PAGES = (window.__trnscopePages && window.__trnscopePages.list) || [];
const pageOf = (scope, name) => PAGES.find((p) => p.scope === scope && (name ? p.name === name : p.home)) || null;
const render = (page, main, args) => import(`./${page.script}`).then((module) => module.default(main, args));

let main = null;
let nav = null;
let current = null;
let generation = 0;

function parseHash() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, query: Object.fromEntries(new URLSearchParams(query || "")) };
}

// the URL's segments after the page name, by the page's parameter names
function paramsOf(page, rest) {
  return Object.fromEntries(page.params.map((name, i) => [name, rest[i]]));
}

async function route() {
  themeButton();
  main = document.getElementById("main");
  nav = document.getElementById("nav");
  const mine = ++generation;
  if (current && current.destroy) current.destroy();
  current = null;
  const { parts, query } = parseHash();
  let result;
  document.body.dataset.page = "";
  try {
    if (parts[0] === "p" && parts[1]) {
      const id = parts[1];
      const page = pageOf("entry", parts[2]);
      if (!page) throw new Error(`unknown page ${parts[2]}`);
      const params = paramsOf(page, parts.slice(3));
      renderNav(page, id, params);
      document.body.dataset.page = page.name;
      // the entry's name arrives with the listing, asked for once the page is up: the view's own
      // data comes first
      const named = () => entries().then(() => { if (mine === generation) renderNav(page, id, params); }, () => null);
      try {
        result = await render(page, main, { id, query, ...params });
      } finally {
        named();
      }
    } else {
      const page = pageOf("global", parts[0]);
      if (!page) throw new Error(`unknown page ${parts[0]}`);
      const params = paramsOf(page, parts.slice(1));
      renderNav(page, null, params);
      document.body.dataset.page = page.name;
      result = await render(page, main, { query, ...params });
    }
  } catch (err) {
    fill(main, errorPanel(err, { title: "Something went wrong" }));
  }
  if (mine !== generation) { if (result && result.destroy) result.destroy(); return; }
  current = result || null;
  document.body.dataset.ready = "1";
}

function renderNav(active, id, params) {
  const link = (href, label, on) => el(`a.tab${on ? ".active" : ""}`, { href }, label);
  const label = (page) => page.nav_title.replace(/\{(\w+)\}/g, (_, name) => params[name] ?? "");
  const items = PAGES.filter((p) => p.scope === "global" && (p.nav || p === active))
    .map((p) => link(p.home ? "#/" : `#/${p.name}`, p === active ? label(p) : p.title, p === active));
  if (id) {
    const entry = entryById(id);
    items.push(el("span.sep", {}, "›"),
      el("span.current", { title: entry ? entry.relpath : id }, entry ? entry.name : id),
      entry ? el("span.badge.small", { "data-kind": entry.kind }, KIND_LABEL[entry.kind] || entry.kind) : null);
    for (const p of PAGES.filter((q) => q.scope === "entry")) {
      const offered = !p.kinds.length || !entry || p.kinds.includes(entry.kind);
      if (p === active) items.push(link(location.hash, label(p), true));
      else if (p.nav && offered) items.push(link(`#/p/${id}/${p.name}`, p.title, false));
    }
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
