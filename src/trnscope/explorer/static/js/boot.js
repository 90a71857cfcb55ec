// Inlined into index.html (see explorer/assets.py). On a timeline page it asks for the layout and
// its first level of detail before anything else, so the slowest answer of the first paint is
// not queued behind the page's own files (a browser opens only 6 connections to one server);
// api.js picks the answer up. Then it loads the modules.
(function () {
  var root = document.currentScript.dataset.static || "/static/";
  try {
    // the theme before the first paint (colors.js keeps it; no flash of the light page)
    var theme = localStorage.getItem("trnscope.theme");
    if (!theme && window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches) theme = "dark";
    if (theme === "dark") document.documentElement.dataset.theme = "dark";
  } catch (e) { /* storage blocked: the light theme */ }
  try {
    var m = /^#\/p\/([^/?]+)(?:\/([^/?]+)(?:\/([^/?]+)\/([^/?]+))?)?/.exec(location.hash);
    if (m && (!m[2] || m[2] === "system" || (m[2] === "device" && m[4]))) {
      var part = function (text) { return encodeURIComponent(decodeURIComponent(text)); };
      var base = "/api/entries/" + part(m[1]) + (m[2] === "device" ? "/device/" + part(m[3]) + "/" + Number(m[4]) : "");
      // the timeline is as wide as the window, less its 260 px label column
      var px = Math.max(1, Math.min(8192, Math.round(document.documentElement.clientWidth - 260)));
      window.__trnscopeBoot = {
        base: base,
        px: px,
        response: fetch(base + "/timeline?px=" + px, { headers: { accept: "application/x-trnscope-columns" } }),
      };
    }
  } finally {
    // the timeline pages' module graph, fetched at once rather than level by level; the table
    // pages' modules load when first shown
    var modules = ["api.js", "colors.js", "format.js", "store.js", "timeline/columns.js", "timeline/draw.js",
                   "timeline/timeline.js", "views/common.js", "views/system.js", "views/device.js", "widgets/details.js"];
    for (var i = 0; i < modules.length; i++) {
      var link = document.createElement("link");
      link.rel = "modulepreload";
      link.href = root + "js/" + modules[i];
      document.head.appendChild(link);
    }
    var main = document.createElement("script");
    main.type = "module";
    main.src = root + "js/main.js";
    document.head.appendChild(main);
  }
})();
