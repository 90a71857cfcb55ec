// The timeline: a canvas showing a time window of many lanes, fed by level-of-detail queries.
//
// Interaction: wheel zooms around the cursor (shift+wheel or a horizontal swipe pans, alt+wheel or
// the wheel over the lane labels scrolls lanes); drag pans; shift+drag (or a drag on the ruler)
// selects a time range; W/S zoom, A/D pan, Esc clears; click selects a slice and shows its
// dependency chain as arrows; F frames the selected slice, M puts a flag (at the selected slice,
// else under the pointer), / goes to the search box (Enter: next match, Shift+Enter: previous).
// Group headers collapse on click, and so does any lane with nested levels (on its label).
//
// Data: the browser asks the server for the visible window padded by half a window each side, at
// one bucket per pixel, and keeps drawing the last answer (stretched) while a new one is in
// flight, so zooming and panning never wait for the network. A new query is made only when the
// view leaves the data's range or its resolution is off by more than 1.5x.

import { colorFor, rankColors } from "../colors.js";
import { el, escapeHtml, fmtTime } from "../format.js";
import { GROUP_H, LABEL_W, LANE_PAD, ROW_H, RULER_H, drawFrame, formatValue, laneHeight } from "./draw.js";

const metrics = (window.__trnscope = window.__trnscope || { timelines: [], firstPaint: null, draws: 0, drawMs: [] });

export class Timeline {
  constructor(container, source, options = {}) {
    this.source = source;
    this.options = options;
    this.strings = new Map();
    this.colors = new Map();
    this.collapsed = new Set();
    this.collapsedLanes = new Set();
    this.flags = [];
    this.matches = null;
    this.matchIndex = -1;
    this.data = null;
    this.selected = null;
    this.details = null;
    this.range = null;
    this.hoverX = null;
    this.inflight = null;
    this.refetch = false;
    this.dirty = false;
    this.destroyed = false;
    this.scrollTop = 0;
    this.build(container);
    metrics.timelines.push(this);
  }

  build(container) {
    this.canvas = el("canvas.tl-canvas");
    this.spacer = el("div.tl-spacer");
    this.scroller = el("div.tl-scroll", {}, this.canvas, this.spacer);
    this.tooltip = el("div.tl-tooltip");
    this.status = el("span.tl-status");
    const button = (label, title, fn, cls = "") => el(`button.tl-btn${cls}`, { title, onclick: fn }, label);
    this.searchInput = el("input.tl-search", { type: "search", placeholder: "Find slices…", "aria-label": "Find slices by name",
      title: "Slice names containing this text (or matching it as a regular expression). Enter: next, Shift+Enter: previous",
      onkeydown: (e) => {
        if (e.key === "Enter") { e.preventDefault(); this.findStep(e.shiftKey ? -1 : 1); }
        else if (e.key === "Escape") { this.searchInput.value = ""; this.clearSearch(); this.searchInput.blur(); }
      },
      oninput: () => { clearTimeout(this.searchTimer); this.searchTimer = setTimeout(() => this.runSearch(), 250); } });
    this.regexBox = el("input", { type: "checkbox", onchange: () => this.runSearch() });
    this.searchCount = el("span.tl-count");
    this.toolbar = el("div.tl-toolbar", {},
      button("−", "Zoom out (S)", () => this.zoomBy(1.6)),
      button("+", "Zoom in (W)", () => this.zoomBy(1 / 1.6)),
      button("Fit", "Show all recorded activity", () => this.fit()),
      el("span.tl-find", {}, this.searchInput,
        el("label.tl-regex", { title: "Treat the text as a regular expression" }, this.regexBox, ".*"),
        button("‹", "Previous match (Shift+Enter)", () => this.findStep(-1), ".tl-prev"),
        button("›", "Next match (Enter)", () => this.findStep(1), ".tl-next"),
        this.searchCount),
      this.options.onFlag ? button("⚑ Flag", "Put a flag at the selected slice, or under the pointer (M)", () => this.addFlag(), ".tl-flag") : null,
      this.options.toolbarExtra || null,
      el("span.tl-help", {}, "wheel: zoom · drag: pan · shift+drag: select · click a label: fold · F: frame · M: flag · Esc: clear"),
      this.status);
    this.root = el("div.timeline", { tabindex: "0" }, this.toolbar, this.scroller, this.tooltip);
    container.append(this.root);
    // opaque: the compositor need not blend the canvas with the page under it
    this.ctx = this.canvas.getContext("2d", { alpha: false });
    this.listen();
  }

  async init(initial = {}) {
    this.status.textContent = "loading…";
    this.resize();
    // the layout comes with the whole trace's level of detail at this width: one round trip
    performance.mark("trnscope:layout-requested");
    this.layout = await this.source.layout(Math.min(Math.round(this.plotW), 8192));
    performance.mark("trnscope:layout-received");
    rankColors(this.layout.color_order);
    for (const g of this.layout.groups) if (g.collapsed) this.collapsed.add(g.id);
    this.relayout();
    const [f0, f1] = this.focusWindow();
    this.t0 = initial.t0 ?? f0;
    this.t1 = initial.t1 ?? f1;
    if (!(this.t1 > this.t0)) [this.t0, this.t1] = [f0, f1];
    if (initial.mark) this.range = { ...initial.mark };
    const first = this.layout.initial_lod;
    if (first) {
      delete this.layout.initial_lod;
      this.accept(first, first.t0, first.t1, first.px, this.visibleLaneIds());
      this.status.textContent = "";
      this.maybeFetch(); // only if the URL asked for another window
    } else {
      await this.fetch();
    }
    this.requestDraw();
    return this.layout;
  }

  // --- geometry ----------------------------------------------------------------------------

  relayout() {
    const rows = [];
    let y = 0;
    for (const group of this.layout.groups) {
      const lanes = this.layout.lanes.filter((l) => l.group === group.id);
      const collapsed = this.collapsed.has(group.id);
      rows.push({ type: "group", group, y, h: GROUP_H, collapsed, count: lanes.length });
      y += GROUP_H;
      if (collapsed) continue;
      for (const lane of lanes) {
        const folded = this.collapsedLanes.has(lane.id);
        const h = laneHeight(lane, folded);
        rows.push({ type: "lane", lane, y, h, collapsed: folded });
        y += h;
      }
    }
    this.rows = rows;
    this.laneRows = new Map(rows.filter((r) => r.type === "lane").map((r) => [r.lane.id, r]));
    this.contentHeight = y;
    this.sizeSpacer();
  }

  // The lanes of expanded groups (what a range selection sums over).
  expandedLaneIds() {
    return [...this.laneRows.keys()];
  }

  // The lanes on screen and a screen above and below: level-of-detail requests ask for these
  // only (a trace with a thread per event has 200k lanes; their ids alone overflow a URL).
  visibleLaneIds() {
    const h = this.height || 1200;
    const top = this.scrollTop - h, bottom = this.scrollTop + 2 * h;
    const ids = [];
    for (const row of this.laneRows.values()) if (row.y + row.h >= top && row.y <= bottom) ids.push(row.lane.id);
    return ids;
  }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    const width = Math.max(this.scroller.clientWidth, LABEL_W + 100);
    const height = Math.max(this.scroller.clientHeight, 120);
    this.width = width;
    this.height = height;
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(height * dpr);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.sizeSpacer();
  }

  sizeSpacer() {
    if (!this.height || this.contentHeight === undefined) return;
    this.spacer.style.height = `${Math.max(0, this.contentHeight + RULER_H - this.height)}px`;
  }

  get plotW() { return Math.max(this.width - LABEL_W, 1); }
  x(t) { return LABEL_W + ((t - this.t0) / (this.t1 - this.t0)) * this.plotW; }
  timeAt(px) { return this.t0 + ((px - LABEL_W) / this.plotW) * (this.t1 - this.t0); }

  rowCenter(laneId, depth) {
    const row = this.laneRows.get(laneId);
    if (!row) return null;
    if (row.collapsed) depth = 0; // a folded lane: arrows meet its top level
    return row.y + RULER_H - this.scrollTop + LANE_PAD + depth * ROW_H + ROW_H / 2 - 1;
  }

  // --- the window --------------------------------------------------------------------------

  setWindow(t0, t1, { silent = false } = {}) {
    const full = Math.max(this.layout.end - this.layout.start, 1000);
    let span = Math.min(Math.max(t1 - t0, 10), full * 4);
    const mid = (t0 + t1) / 2;
    this.t0 = mid - span / 2;
    this.t1 = mid + span / 2;
    this.requestDraw();
    this.maybeFetch();
    if (!silent && this.options.onWindow) this.options.onWindow(this.t0, this.t1);
  }

  zoomBy(factor, atX = null) {
    const anchor = atX === null ? (this.t0 + this.t1) / 2 : this.timeAt(atX);
    this.setWindow(anchor - (anchor - this.t0) * factor, anchor + (this.t1 - anchor) * factor);
  }

  panBy(pixels) {
    const dt = (pixels / this.plotW) * (this.t1 - this.t0);
    this.setWindow(this.t0 + dt, this.t1 + dt);
  }

  // What the program did (the server leaves out the profiler's own session span and markers,
  // which can make most of the trace's span empty), with a 1% margin.
  focusWindow() {
    const start = this.layout.focus_start ?? this.layout.start;
    const end = this.layout.focus_end ?? this.layout.end;
    const pad = Math.max(end - start, 1000) * 0.01;
    return [start - pad, end + pad];
  }

  fit() {
    this.setWindow(...this.focusWindow());
  }

  focus(item, { select = true } = {}) {
    this.reveal(item);
    const dur = Math.max(item.dur, 1);
    const pad = Math.max(dur * 1.5, 500);
    this.setWindow(item.ts - pad, item.ts + dur + pad);
    const row = this.laneRows.get(item.lane);
    if (row) {
      const top = row.y - 40;
      if (top < this.scroller.scrollTop || row.y + row.h > this.scroller.scrollTop + this.height - RULER_H) {
        this.scroller.scrollTop = Math.max(0, top);
      }
    }
    if (select) this.select(item.row);
  }

  // The lane of ``item`` shown: its group expanded, and its lane unfolded if the item is nested.
  reveal(item) {
    const lane = this.layout.lanes.find((l) => l.id === item.lane);
    if (!lane) return;
    let changed = false;
    if (this.collapsed.has(lane.group)) { this.collapsed.delete(lane.group); changed = true; }
    if (item.depth > 0 && this.collapsedLanes.has(lane.id)) { this.collapsedLanes.delete(lane.id); changed = true; }
    if (changed) { this.relayout(); this.maybeFetch(); }
  }

  // --- search ------------------------------------------------------------------------------

  // Ask the server for the matches of the search box's text (once per text: Enter and the pause
  // after typing share one request).
  runSearch() {
    const text = this.searchInput.value.trim();
    if (!text) { this.clearSearch(); return Promise.resolve(); }
    const regex = this.regexBox.checked;
    const key = `${regex ? "re" : "text"}:${text}`;
    if (this.matches && this.matchesKey === key) return Promise.resolve();
    if (this.pendingKey === key) return this.pending;
    if (regex) {
      try { new RegExp(text); } catch (err) { this.searchFailed(`not a valid regular expression: ${err.message}`); return Promise.resolve(); }
    }
    const mine = (this.searchSeq = (this.searchSeq || 0) + 1);
    this.pendingKey = key;
    this.pending = (async () => {
      try {
        // every lane, shown or not: a match in a collapsed group or a folded lane is revealed
        const found = await this.source.search(text, regex);
        if (mine !== this.searchSeq || this.destroyed) return;
        const m = found.matches;
        this.matches = { ...m, ts: Float64Array.from(m.ts), count: found.count, truncated: found.truncated };
        this.matchesFor = text;
        this.matchesKey = key;
        this.matchIndex = -1;
        this.searchInput.classList.remove("bad");
        this.showCount();
        this.requestDraw();
      } catch (err) {
        if (mine === this.searchSeq) this.searchFailed(err.message);
      } finally {
        if (this.pendingKey === key) this.pendingKey = null;
      }
    })();
    return this.pending;
  }

  searchFailed(message) {
    this.searchSeq = (this.searchSeq || 0) + 1;
    this.matches = null;
    this.matchesKey = null;
    this.searchInput.classList.add("bad");
    this.searchCount.textContent = message;
    this.requestDraw();
  }

  clearSearch() {
    this.searchSeq = (this.searchSeq || 0) + 1;
    this.pendingKey = null;
    this.matches = null;
    this.matchesKey = null;
    this.matchIndex = -1;
    this.searchInput.classList.remove("bad");
    this.searchCount.textContent = "";
    this.requestDraw();
  }

  showCount() {
    const m = this.matches;
    if (!m) { this.searchCount.textContent = ""; return; }
    const total = m.truncated ? `${m.row.length}+ of ${m.count}` : `${m.count}`;
    this.searchCount.textContent = m.count ? `${this.matchIndex >= 0 ? this.matchIndex + 1 : "–"} / ${total}` : "no match";
  }

  // The next (or previous) match after the current one; the first step goes to the first match
  // after the selected slice (or the window's start).
  async findStep(direction) {
    await this.runSearch(); // nothing to do when the matches are for this text
    const m = this.matches;
    if (!m || !m.row.length) return;
    let i;
    if (this.matchIndex >= 0) {
      i = (this.matchIndex + direction + m.row.length) % m.row.length;
    } else {
      const from = this.selected ? this.selected.ts : this.t0;
      i = direction > 0 ? m.ts.findIndex((t) => t > from) : findLastIndex(m.ts, (t) => t < from);
      if (i < 0) i = direction > 0 ? 0 : m.row.length - 1;
    }
    this.matchIndex = i;
    this.showCount();
    this.focus({ row: m.row[i], lane: m.lane[i], ts: m.ts[i], dur: m.dur[i], depth: m.depth[i] });
  }

  // --- flags -------------------------------------------------------------------------------

  setFlags(flags) {
    this.flags = flags || [];
    this.requestDraw();
  }

  addFlag() {
    if (!this.options.onFlag) return;
    const ts = this.selected ? this.selected.ts
      : this.hoverX !== null && this.hoverX >= LABEL_W ? this.timeAt(this.hoverX) : (this.t0 + this.t1) / 2;
    this.options.onFlag({ ts: Math.round(ts), row: this.selected ? this.selected.row : null });
  }

  flagAt(px) {
    for (const flag of this.flags) if (Math.abs(this.x(flag.ts) - px) <= 6) return flag;
    return null;
  }

  // The selected slice (or the range) filling most of the window.
  frameSelection() {
    const item = this.selected || (this.range ? { ts: Math.min(this.range.t0, this.range.t1), dur: Math.abs(this.range.t1 - this.range.t0) } : null);
    if (!item) return;
    const pad = Math.max(item.dur * 0.25, 200);
    this.setWindow(item.ts - pad, item.ts + item.dur + pad);
  }

  // --- data --------------------------------------------------------------------------------

  maybeFetch() {
    const d = this.data;
    const resolution = (this.t1 - this.t0) / this.plotW;
    const stale = !d || this.t0 < d.a || this.t1 > d.b || resolution < d.res / 1.5 || resolution > d.res * 1.5
      || this.visibleLaneIds().some((id) => !d.fetched.has(id));
    if (stale) {
      clearTimeout(this.fetchTimer);
      this.fetchTimer = setTimeout(() => this.fetch(), 40);
    }
  }

  async fetch() {
    if (this.inflight) { this.refetch = true; return; }
    const span = this.t1 - this.t0;
    const a = Math.floor(this.t0 - span / 2);
    const b = Math.ceil(this.t1 + span / 2);
    const px = Math.min(Math.round(this.plotW * 2), 8192);
    const lanes = this.visibleLaneIds();
    this.status.textContent = "loading…";
    const request = this.source.lod(a, b, px, lanes);
    this.inflight = request;
    try {
      const response = await request;
      if (this.destroyed) return;
      this.accept(response, a, b, px, lanes);
      this.status.textContent = "";
      this.requestDraw();
    } catch (err) {
      this.status.textContent = `⚠ ${err.message}`;
    } finally {
      this.inflight = null;
      if (this.refetch) { this.refetch = false; this.maybeFetch(); }
    }
  }

  accept(response, a, b, px, lanes) {
    for (const [id, text] of Object.entries(response.strings)) this.strings.set(Number(id), text);
    for (const lane of Object.values(response.lanes)) if (lane.depth) lane.levels = levelRanges(lane.depth);
    // the lanes this answer holds (the first one, sent with the layout, may hold fewer than asked)
    this.data = { ...response, a, b, res: (b - a) / px, fetched: new Set(Object.keys(response.lanes)) };
  }

  colorOf(id) {
    let color = this.colors.get(id);
    if (!color) {
      const text = this.strings.get(id);
      if (text === undefined) return "#9aa5b1";
      color = colorFor(text);
      this.colors.set(id, color);
    }
    return color;
  }

  // --- drawing -----------------------------------------------------------------------------

  requestDraw() {
    if (this.dirty || this.destroyed) return;
    this.dirty = true;
    requestAnimationFrame(() => this.draw());
  }

  draw() {
    this.dirty = false;
    if (!this.layout || this.destroyed) return;
    const started = performance.now();
    drawFrame(this.ctx, this.frame());
    const spent = performance.now() - started;
    metrics.draws += 1;
    metrics.drawMs.push(spent);
    if (metrics.drawMs.length > 2000) metrics.drawMs.splice(0, 1000);
    if (this.data && !this.painted) {
      this.painted = true;
      if (metrics.firstPaint === null) {
        metrics.firstPaint = performance.now();
        performance.mark("trnscope:first-paint");
      }
      // whatever helps later frames (the fetching worker) starts now, not before the first one
      if (this.source.prepare) setTimeout(() => this.source.prepare(), 0);
    }
  }

  frame() {
    return {
      width: this.width, height: this.height, plotW: this.plotW, t0: this.t0, t1: this.t1,
      rows: this.rows, scrollTop: this.scrollTop, data: this.data, strings: this.strings,
      selected: this.selected, range: this.range, hoverX: this.hoverX, flags: this.flags, matches: this.matches,
      arrows: this.arrows(), x: (t) => this.x(t), rowCenter: (lane, depth) => this.rowCenter(lane, depth),
      colorOf: (id) => this.colorOf(id),
    };
  }

  arrows() {
    const d = this.details;
    if (!d) return [];
    const out = [];
    const self = { lane: d.lane, ts: d.ts, dur: d.dur, depth: d.depth };
    // a semaphore is signalled when its instruction ends: those arrows leave the source's end
    for (const item of d.downstream || []) {
      out.push({ from: item.from || self, to: item, upstream: false, fromEnd: item.flow === "semaphore" });
    }
    for (const item of d.upstream || []) {
      out.push({ from: item, to: item.from || self, upstream: true, fromEnd: item.flow === "semaphore" });
    }
    return out;
  }

  // --- selection ---------------------------------------------------------------------------

  async select(row) {
    if (row === null || row === undefined) { this.clearSelection(); return; }
    try {
      const details = await this.source.details(row);
      if (this.destroyed) return;
      this.details = details;
      this.selected = { row, lane: details.lane, ts: details.ts, dur: details.dur, depth: details.depth };
      this.requestDraw();
      if (this.options.onSelect) this.options.onSelect(details);
    } catch (err) {
      if (this.options.onError) this.options.onError(err);
    }
  }

  clearSelection() {
    this.details = null;
    this.selected = null;
    this.range = null;
    this.requestDraw();
    if (this.options.onSelect) this.options.onSelect(null);
  }

  async finishRange() {
    const r = this.range;
    if (!r || Math.abs(r.t1 - r.t0) <= 0) return;
    const [t0, t1] = [Math.min(r.t0, r.t1), Math.max(r.t0, r.t1)];
    try {
      const summary = await this.source.select(t0, t1, this.expandedLaneIds());
      if (this.options.onRange) this.options.onRange(summary);
    } catch (err) {
      if (this.options.onError) this.options.onError(err);
    }
  }

  hit(px, py) {
    if (!this.data || px < LABEL_W || py < RULER_H) return null;
    const y = py - RULER_H + this.scrollTop;
    const row = this.rows.find((r) => y >= r.y && y < r.y + r.h);
    if (!row || row.type !== "lane") return row ? { group: row } : null;
    const lane = row.lane;
    const d = this.data.lanes[lane.id];
    if (!d) return null;
    const t = this.timeAt(px);
    if (lane.kind === "counter") return { lane, counter: this.counterAt(lane, d, t), t };
    const depth = Math.floor((y - row.y - LANE_PAD) / ROW_H);
    if (row.collapsed && depth > 0) return { lane };
    const tolerance = (3 / this.plotW) * (this.t1 - this.t0);
    let best = null;
    for (let i = 0; i < d.ts.length; i++) {
      if (d.depth[i] !== depth) continue;
      if (t >= d.ts[i] - tolerance && t <= d.ts[i] + Math.max(d.dur[i], 0) + tolerance) {
        if (best === null || d.dur[i] > d.dur[best]) best = i;
      }
    }
    if (best === null) return { lane };
    return {
      lane,
      slice: { row: d.row[best], lane: lane.id, ts: d.ts[best], dur: d.dur[best], depth, merged: d.merged[best],
               name: this.strings.get(d.name[best]) ?? "", color: this.strings.get(d.color[best]) ?? "" },
    };
  }

  // Where a slice named ``name`` is drawn (page coordinates of its centre), or null: a hook for
  // automation (the browser tests click through it) and for "find" features.
  locate(name, laneTitle = null) {
    if (!this.data) return null;
    const box = this.canvas.getBoundingClientRect();
    for (const row of this.rows) {
      if (row.type !== "lane" || (laneTitle && !row.lane.title.startsWith(laneTitle))) continue;
      const d = this.data.lanes[row.lane.id];
      if (!d || !d.ts) continue;
      for (let i = 0; i < d.ts.length; i++) {
        if (this.strings.get(d.name[i]) !== name) continue;
        const left = Math.max(this.x(d.ts[i]), LABEL_W);
        const right = Math.min(this.x(d.ts[i] + d.dur[i]), this.width);
        const y = this.rowCenter(row.lane.id, d.depth[i]);
        if (right - left < 2 || y < RULER_H || y > this.height) continue;
        return { x: box.left + (left + right) / 2, y: box.top + y, row: d.row[i], lane: row.lane.id };
      }
    }
    return null;
  }

  counterAt(lane, d, t) {
    const out = [];
    for (const s of lane.series || []) {
      const series = d.series[String(s.id)];
      if (!series || !series.ts.length) continue;
      let i = 0;
      while (i + 1 < series.ts.length && series.ts[i + 1] <= t) i++;
      out.push({ name: s.name, value: series.v[i] });
    }
    return out;
  }

  // --- events ------------------------------------------------------------------------------

  listen() {
    const canvas = this.canvas;
    this.onResize = () => {
      this.resize();
      if (!this.layout) return; // the first layout request is still in flight
      this.requestDraw();
      this.maybeFetch();
    };
    this.resizeObserver = new ResizeObserver(this.onResize);
    this.resizeObserver.observe(this.scroller);
    this.scroller.addEventListener("scroll", () => {
      this.scrollTop = this.scroller.scrollTop;
      this.requestDraw();
      this.maybeFetch(); // lanes scrolled into view
    });
    canvas.addEventListener("wheel", (e) => this.onWheel(e), { passive: false });
    canvas.addEventListener("mousedown", (e) => this.onMouseDown(e));
    canvas.addEventListener("mousemove", (e) => this.onHover(e));
    canvas.addEventListener("mouseleave", () => { this.hoverX = null; this.tooltip.style.display = "none"; this.requestDraw(); });
    this.root.addEventListener("mouseenter", () => { Timeline.active = this; });
    this.onKey = (e) => this.onKeyDown(e);
    window.addEventListener("keydown", this.onKey);
    Timeline.active = this;
  }

  onWheel(e) {
    if (e.offsetX < LABEL_W) return; // the label column scrolls lanes natively
    e.preventDefault();
    const scale = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? this.height : 1;
    const dx = e.deltaX * scale;
    const dy = e.deltaY * scale;
    if (e.altKey) { this.scroller.scrollTop += dy; return; }
    if (e.shiftKey || Math.abs(dx) > Math.abs(dy)) { this.panBy(e.shiftKey ? dy || dx : dx); return; }
    this.zoomBy(Math.exp(dy * 0.0015), e.offsetX);
  }

  onMouseDown(e) {
    if (e.button !== 0) return;
    const startX = e.offsetX;
    const startY = e.offsetY;
    if (startX < LABEL_W) {
      const hit = this.labelAt(startY);
      if (hit && hit.type === "group") this.toggleGroup(hit.group.id);
      else if (hit && hit.lane.kind !== "counter" && hit.lane.depth > 1) this.toggleLane(hit.lane.id);
      return;
    }
    const selecting = e.shiftKey || startY < RULER_H;
    const t0 = this.t0;
    const t1 = this.t1;
    const startTime = this.timeAt(startX);
    let moved = false;
    const move = (ev) => {
      const dx = ev.clientX - e.clientX;
      if (Math.abs(dx) > 3 || Math.abs(ev.clientY - e.clientY) > 3) moved = true;
      if (!moved) return;
      if (selecting) {
        const rect = this.canvas.getBoundingClientRect();
        this.range = { t0: startTime, t1: this.timeAt(ev.clientX - rect.left) };
        this.requestDraw();
      } else {
        const dt = (dx / this.plotW) * (t1 - t0);
        this.setWindow(t0 - dt, t1 - dt);
      }
    };
    const up = () => {
      window.removeEventListener("mousemove", move);
      window.removeEventListener("mouseup", up);
      if (!moved) {
        const hit = this.hit(startX, startY);
        if (hit && hit.slice) this.select(hit.slice.row);
        else if (!selecting) this.clearSelection();
      } else if (selecting) {
        this.finishRange();
      }
    };
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
  }

  labelAt(py) {
    if (py < RULER_H) return null;
    const y = py - RULER_H + this.scrollTop;
    return this.rows.find((r) => y >= r.y && y < r.y + r.h) || null;
  }

  toggleLane(id) {
    if (this.collapsedLanes.has(id)) this.collapsedLanes.delete(id);
    else this.collapsedLanes.add(id);
    this.relayout();
    this.requestDraw();
  }

  toggleGroup(id) {
    if (this.collapsed.has(id)) this.collapsed.delete(id);
    else this.collapsed.add(id);
    this.relayout();
    this.requestDraw();
    this.maybeFetch();
  }

  onHover(e) {
    this.hoverX = e.offsetX;
    this.requestDraw();
    const hit = this.hit(e.offsetX, e.offsetY);
    const tip = this.tooltip;
    let html = "";
    const flag = e.offsetY < RULER_H ? this.flagAt(e.offsetX) : null;
    if (flag) {
      html = `<b>⚑ ${fmtTime(flag.ts)}</b>${flag.note ? `<br>${escapeHtml(flag.note)}` : ""}`;
    } else if (hit && hit.slice) {
      const s = hit.slice;
      html = `<b>${escapeHtml(s.name)}</b><br>${fmtTime(s.dur)} at ${fmtTime(s.ts)}`
        + (s.merged > 1 ? `<br><i>${s.merged} slices at this zoom</i>` : "")
        + (s.color && s.color !== s.name ? `<br><span class="muted">${escapeHtml(s.color)}</span>` : "");
    } else if (hit && hit.counter && hit.counter.length) {
      html = hit.counter.map((c) => `${escapeHtml(c.name)}: <b>${formatValue(c.value, c.name)}</b>`).join("<br>");
    }
    if (!html) { tip.style.display = "none"; return; }
    tip.innerHTML = html;
    tip.style.display = "block";
    const rect = this.root.getBoundingClientRect();
    const canvasRect = this.canvas.getBoundingClientRect();
    const left = canvasRect.left - rect.left + e.offsetX + 14;
    tip.style.left = `${Math.min(left, rect.width - 260)}px`;
    tip.style.top = `${canvasRect.top - rect.top + e.offsetY + 14}px`;
  }

  onKeyDown(e) {
    if (Timeline.active !== this || this.destroyed || !this.layout) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return; // the browser's own shortcuts (Ctrl+F, ...)
    const target = e.target;
    if (target && (target.tagName === "INPUT" || target.tagName === "SELECT" || target.tagName === "TEXTAREA")) return;
    const key = e.key.toLowerCase();
    const centre = this.hoverX !== null && this.hoverX >= LABEL_W ? this.hoverX : null;
    if (key === "w" || key === "+" || key === "=") this.zoomBy(1 / 1.4, centre);
    else if (key === "s" || key === "-") this.zoomBy(1.4, centre);
    else if (key === "a" || key === "arrowleft") this.panBy(-this.plotW * 0.15);
    else if (key === "d" || key === "arrowright") this.panBy(this.plotW * 0.15);
    else if (key === "escape") { this.clearSelection(); if (this.options.onRange) this.options.onRange(null); }
    else if (key === "f") this.frameSelection();
    else if (key === "m") this.addFlag();
    else if (e.key === "/") { this.searchInput.focus(); this.searchInput.select(); }
    else return;
    e.preventDefault();
  }

  destroy() {
    this.destroyed = true;
    window.removeEventListener("keydown", this.onKey);
    this.resizeObserver.disconnect();
    const i = metrics.timelines.indexOf(this);
    if (i >= 0) metrics.timelines.splice(i, 1);
    if (Timeline.active === this) Timeline.active = metrics.timelines[metrics.timelines.length - 1] || null;
    this.root.remove();
  }
}

Timeline.active = null;

function findLastIndex(values, test) {
  for (let i = values.length - 1; i >= 0; i--) if (test(values[i])) return i;
  return -1;
}

// Level-of-detail slices come ordered by (nesting level, time): the index ranges of each level,
// so drawing can binary-search the visible part of every level instead of scanning them all.
function levelRanges(depth) {
  const out = [];
  let start = 0;
  for (let i = 1; i <= depth.length; i++) {
    if (i === depth.length || depth[i] !== depth[i - 1]) {
      out.push(start, i);
      start = i;
    }
  }
  return out;
}
