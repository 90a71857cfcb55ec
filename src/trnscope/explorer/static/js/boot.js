// Inlined into index.html (see explorer/assets.py). On a timeline page it asks for the layout and
// its first level of detail before anything else, so the slowest answer of the first paint is
// not queued behind the page's own files (a browser opens only 6 connections to one server);
// api.js picks the answer up. Then it loads the modules. The pages (explorer/pages) come in
// data-pages; main.js routes with the same list (window.__trnscopePages).
(function () {
  var script = document.currentScript;
  var root = script.dataset.static || "/static/";
  var pages = [];
  try { pages = JSON.parse(script.dataset.pages || "[]"); } catch (e) { pages = []; }
  var part = function (text) { return encodeURIComponent(String(text)); };
  // the API base of an entry page's timeline: /api/entries/<id> + its route with the URL's
  // (decoded) values
  var timelineBase = function (page, id, values) {
    return "/api/entries/" + part(id) + page.timeline.replace(/\{(\w+)(?::(\w+))?\}/g, function (_, name, kind) {
      return kind === "int" ? String(Number(values[name])) : part(values[name]);
    });
  };
  window.__trnscopePages = { list: pages, timelineBase: timelineBase };
  try {
    // the theme before the first paint (colors.js keeps it; no flash of the light page)
    var theme = localStorage.getItem("trnscope.theme");
    if (!theme && window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches) theme = "dark";
    if (theme === "dark") document.documentElement.dataset.theme = "dark";
  } catch (e) { /* storage blocked: the light theme */ }
  var timelinePages = pages.filter(function (p) { return p.timeline !== null; });
  try {
    // #/p/<id>[/<page>[/<param>...]]: an entry page; a timeline page names its timeline's API route
    var parts = location.hash.replace(/^#/, "").split("?")[0].split("/").filter(Boolean).map(decodeURIComponent);
    if (parts[0] === "p" && parts[1]) {
      var page = null;
      for (var i = 0; i < pages.length; i++) {
        var p = pages[i];
        if (p.scope === "entry" && (parts[2] ? p.name === parts[2] : p.home)) page = p;
      }
      var values = {};
      if (page) for (var k = 0; k < page.params.length; k++) values[page.params[k]] = parts[3 + k];
      var complete = page && page.timeline !== null && page.params.every(function (name) { return values[name]; });
      if (complete) {
        var base = timelineBase(page, parts[1], values);
        // the timeline is as wide as the window, less its 260 px label column
        var px = Math.max(1, Math.min(8192, Math.round(document.documentElement.clientWidth - 260)));
        window.__trnscopeBoot = {
          base: base,
          px: px,
          response: fetch(base + "/timeline?px=" + px, { headers: { accept: "application/x-trnscope-columns" } }),
        };
      }
    }
  } catch (e) {
    /* a malformed URL: no early request (main.js says what is wrong) */
  } finally {
    // the timeline pages' module graph, fetched at once rather than level by level; the other
    // pages' modules load when first shown
    var modules = ["api.js", "colors.js", "format.js", "store.js", "timeline/columns.js", "timeline/draw.js",
                   "timeline/timeline.js", "views/common.js", "widgets/details.js"];
    for (var j = 0; j < timelinePages.length; j++) modules.push(timelinePages[j].script);
    for (var m = 0; m < modules.length; m++) {
      var link = document.createElement("link");
      link.rel = "modulepreload";
      link.href = root + "js/" + modules[m];
      document.head.appendChild(link);
    }
    var main = document.createElement("script");
    main.type = "module";
    main.src = root + "js/main.js";
    document.head.appendChild(main);
  }
})();
