// A multi-rank run as one (#/run/<id>): every rank on the shared clock, two lanes per rank (its
// compute kernels and its collectives), each collective linked across its ranks. A collective's
// slice starts when its rank reached it and is drawn in two parts: the wait for the others (red,
// hatched) and the transfer once the last rank arrived. Clicking one selects it on every rank and
// lists its peers' arrivals and waits; the tables below rank the stragglers and the collectives with
// the most waiting, and give each rank's compute/communication overlap. The data is
// /api/runs/<id> (explorer/ranks_view.py), the same numbers as `trnscope summary RUN`.

import { getJSON } from "../api.js";
import { colorFor, theme, WAIT_COLOR } from "../colors.js";
import { el, fill, fmtBytes, fmtCount, fmtPercentValue, fmtTime } from "../format.js";
import { DataTable } from "../widgets/table.js";
import { errorPanel, loading, replaceQuery } from "./common.js";

const LABEL_W = 150;
const RULER_H = 24;
const LANE_H = 22;
const RANK_GAP = 8;
const TRANSFER_COLOR = "#3f6fb5";

function stylesheet() {
  const href = new URL("../../css/ranks.css", import.meta.url).href;
  if (![...document.querySelectorAll("link[rel=stylesheet]")].some((l) => l.href === href)) {
    document.head.append(el("link", { rel: "stylesheet", href }));
  }
}

export async function runsView(main) {
  stylesheet();
  fill(main, loading("Looking for multi-rank runs…"));
  const { runs } = await getJSON("/api/runs");
  fill(main, el("div.ranks-page", {},
    el("div.page-head", {}, el("h1", {}, "Multi-rank runs")),
    runs.length ? el("ul.run-list", {}, runs.map((r) => el("li", {}, el("a.link", { href: `#/run/${r.id}` }, r.name))))
      : el("div.empty", {}, "No multi-rank runs here. Profile one with `trnscope run --nproc N --profile RUN script.py`.")));
  return null;
}

// the Run page (#/run/<id>): explorer/pages/run.py
export default async function ranksView(main, { rid, query }) {
  stylesheet();
  fill(main, loading("Reading every rank's profile…"));
  let data;
  try {
    data = await getJSON(`/api/runs/${encodeURIComponent(rid)}`);
  } catch (err) {
    fill(main, errorPanel(err, { title: "This run cannot be opened" }));
    return null;
  }
  return new RunPage(main, data, query || {});
}

class RunPage {
  constructor(main, data, query) {
    this.data = data;
    this.selected = null;
    this.t0 = 0;
    this.t1 = Math.max(data.span_ns, 1);
    this.hover = null;
    this.detail = el("div.run-detail");
    this.canvas = el("canvas.run-canvas");
    this.tip = el("div.run-tip");
    const s = data.straggler;
    const whatif = Object.entries(data.whatif || {}).filter(([, v]) => v).map(([k, v]) => `${k}=${v}`);
    this.tables = this.buildTables();
    fill(main, el("div.ranks-page", {},
      el("div.page-head", {},
        el("div", {},
          el("h1", {}, data.name),
          el("p.muted", {}, `${data.ranks.length} of ${data.world_size} ranks · ${data.instance || "instance unknown"} · `
            + `${fmtCount(data.collectives.length)} collectives · shared clock`
            + (whatif.length ? ` · what-if ${whatif.join(", ")}` : ""))),
        el(`div.straggler-call${s === null || s === undefined ? ".none" : ""}`, {}, s === null || s === undefined ? "no rank kept the others waiting"
          : el("span", {}, "straggler: ", el("b", { "data-testid": "straggler" }, `rank ${s}`)))),
      data.problems.length ? el("ul.warnings", {}, data.problems.map((p) => el("li", {}, p))) : null,
      el("div.run-timeline", {}, this.canvas, this.tip),
      el("p.muted.run-help", {}, "Wheel: zoom · drag: pan · double-click: whole run · click a collective to link it across ranks"),
      this.detail,
      el("div.two-col", {},
        el("section", {}, el("h2", {}, "Stragglers"), el("p.muted", {}, "Who reaches collectives last, and the waiting it causes the others."), el("div.table-wrap", {}, this.tables.stragglers.node)),
        el("section", {}, el("h2", {}, "Compute / communication overlap"), el("p.muted", {}, "Share of each rank's collective time its compute kernels overlap."), el("div.table-wrap", {}, this.tables.overlap.node))),
      el("section", {}, el("h2", {}, "Collectives"), el("p.muted", {}, "Every collective: who arrived last, by how much, and how long the others waited. Click a row to show it."),
        el("div.table-wrap", {}, this.tables.collectives.node))));
    this.bind();
    this.resize();
    this.renderDetail();
    const pick = Number(query.c);
    if (query.c !== undefined && Number.isInteger(pick) && data.collectives[pick]) this.select(pick, true);
    window.__trnscope = window.__trnscope || {};
    window.__trnscope.run = this; // for tests and the console
  }

  // --- tables --------------------------------------------------------------------------------
  buildTables() {
    const d = this.data;
    const stragglers = new DataTable({
      columns: [
        { key: "rank", title: "rank", format: (v) => `rank ${v}` },
        { key: "last_count", title: "last at", align: "right", tip: "collectives this rank reached last" },
        { key: "caused_wait_ns", title: "others waited", align: "right", format: fmtTime },
        { key: "own_wait_ns", title: "own wait", align: "right", format: fmtTime },
      ],
      rows: d.stragglers.map((r) => ({ ...r, __key: r.rank })), sortKey: "caused_wait_ns",
      rowClass: (r) => (r.rank === d.straggler ? "straggler" : "plain"),
    });
    const overlap = new DataTable({
      columns: [
        { key: "rank", title: "rank", format: (v) => `rank ${v}` },
        { key: "comm_ns", title: "collective time", align: "right", format: fmtTime },
        { key: "compute_ns", title: "compute time", align: "right", format: fmtTime },
        { key: "overlap_ns", title: "overlapped", align: "right", format: fmtTime },
        { key: "overlap_percent", title: "share", align: "right", format: (v) => el("span.share", {}, el("span.share-bar", { style: `width:${Math.min(100, v)}%` }), fmtPercentValue(v)) },
      ],
      rows: d.overlap.map((r) => ({ ...r, __key: r.rank })), sortKey: "rank", sortDesc: false,
    });
    const collectives = new DataTable({
      columns: [
        { key: "label", title: "collective" },
        { key: "group", title: "group" },
        { key: "bytes", title: "bytes", align: "right", format: fmtBytes },
        { key: "algorithm", title: "algorithm" },
        { key: "duration_ns", title: "device time", align: "right", format: fmtTime },
        { key: "last_rank", title: "last rank", align: "right", format: (v) => (v === null || v === undefined ? "–" : `rank ${v}`) },
        { key: "late_by_ns", title: "late by", align: "right", format: fmtTime },
        { key: "others_wait_ns", title: "others waited", align: "right", format: fmtTime },
      ],
      rows: d.collectives.map((c) => ({ ...c, label: `${c.kind} #${c.seq}`, __key: c.id })),
      sortKey: "others_wait_ns", onRowClick: (row) => this.select(row.id, true),
      rowClass: (row) => (this.selected === row.id ? "selected" : "plain"),
    });
    return { stragglers, overlap, collectives };
  }

  // --- geometry ------------------------------------------------------------------------------
  rows() {
    const out = [];
    let y = RULER_H;
    for (const rank of this.data.ranks) {
      out.push({ rank, lane: "compute", y, label: `rank ${rank.rank}`, sub: "compute" });
      y += LANE_H;
      out.push({ rank, lane: "collectives", y, label: "", sub: "collectives" });
      y += LANE_H + RANK_GAP;
    }
    this.height = y;
    return out;
  }

  x(ns) { return LABEL_W + ((ns - this.t0) / (this.t1 - this.t0)) * (this.width - LABEL_W); }
  ns(x) { return this.t0 + ((x - LABEL_W) / (this.width - LABEL_W)) * (this.t1 - this.t0); }

  // where the slice of collective ``cid`` on ``rank`` is drawn (CSS pixels, for tests)
  slicePosition(rank, cid) {
    const row = this.rows().find((r) => r.rank.rank === rank && r.lane === "collectives");
    const s = row && row.rank.collectives.find((c) => c[3] === cid);
    if (!s) return null;
    const box = this.canvas.getBoundingClientRect();
    const a = Math.max(this.x(s[0]), LABEL_W);
    const b = Math.min(this.x(s[2]), this.width);
    return { x: box.left + (a + b) / 2, y: box.top + row.y + LANE_H / 2 };
  }

  resize() {
    const rows = this.rows();
    const dpr = window.devicePixelRatio || 1;
    this.width = Math.max(400, this.canvas.parentElement.clientWidth);
    this.canvas.width = Math.round(this.width * dpr);
    this.canvas.height = Math.round(this.height * dpr);
    this.canvas.style.width = `${this.width}px`;
    this.canvas.style.height = `${this.height}px`;
    this.dpr = dpr;
    this.draw(rows);
  }

  // --- drawing -------------------------------------------------------------------------------
  draw(rows = this.rows()) {
    const ctx = this.canvas.getContext("2d");
    const t = theme();
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    ctx.fillStyle = t.bg;
    ctx.fillRect(0, 0, this.width, this.height);
    this.drawRuler(ctx, t);
    const sel = this.selected === null ? null : this.data.collectives[this.selected];
    for (const row of rows) {
      ctx.fillStyle = row.lane === "compute" ? t.groupBg : t.ruler;
      ctx.fillRect(0, row.y, LABEL_W, LANE_H);
      ctx.fillStyle = t.groupInk;
      ctx.font = row.lane === "compute" ? "bold 12px system-ui, sans-serif" : "11px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      ctx.fillText(row.lane === "compute" ? `${row.label} · compute` : "  collectives", 8, row.y + LANE_H / 2);
      if (row.rank.rank === this.data.straggler && row.lane === "collectives") {
        ctx.fillStyle = WAIT_COLOR;
        ctx.fillText("straggler", LABEL_W - 56, row.y + LANE_H / 2);
      }
      ctx.strokeStyle = t.line;
      ctx.beginPath();
      ctx.moveTo(0, row.y + LANE_H - 0.5);
      ctx.lineTo(this.width, row.y + LANE_H - 0.5);
      ctx.stroke();
      ctx.save();
      ctx.beginPath();
      ctx.rect(LABEL_W, row.y, this.width - LABEL_W, LANE_H);
      ctx.clip();
      if (row.lane === "compute") this.drawCompute(ctx, row);
      else this.drawCollectives(ctx, row, sel, t);
      ctx.restore();
    }
    if (sel) this.drawLinks(ctx, rows, sel, t);
  }

  drawRuler(ctx, t) {
    ctx.fillStyle = t.ruler;
    ctx.fillRect(0, 0, this.width, RULER_H);
    const span = this.t1 - this.t0;
    const step = niceStep(span / 8);
    ctx.fillStyle = t.rulerInk;
    ctx.strokeStyle = t.rulerLine;
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    // enough digits that neighbouring ticks read apart, far into a long run
    const digits = Math.max(2, Math.ceil(Math.log10(Math.max(Math.abs(this.t1), step) / step)) + 1);
    for (let v = Math.ceil(this.t0 / step) * step; v <= this.t1; v += step) {
      const x = Math.round(this.x(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, RULER_H - 6);
      ctx.lineTo(x, RULER_H);
      ctx.stroke();
      ctx.fillText(fmtTime(v, digits), x + 3, RULER_H / 2);
    }
  }

  drawCompute(ctx, row) {
    const names = this.data.names;
    let lastX = -1;
    for (const [start, dur, name] of row.rank.compute) {
      if (start + dur < this.t0 || start > this.t1) continue;
      const a = this.x(start);
      const b = Math.max(this.x(start + dur), a + 1);
      if (b < lastX) continue; // under a pixel already drawn
      ctx.fillStyle = colorFor(names[name]);
      ctx.fillRect(a, row.y + 3, b - a, LANE_H - 6);
      lastX = b;
    }
  }

  drawCollectives(ctx, row, sel, t) {
    for (const [arrive, transfer, end, cid] of row.rank.collectives) {
      if (end < this.t0 || arrive > this.t1) continue;
      const a = this.x(arrive);
      const m = this.x(transfer);
      const b = Math.max(this.x(end), a + 1);
      if (m > a) {
        ctx.fillStyle = WAIT_COLOR;
        ctx.globalAlpha = 0.28;
        ctx.fillRect(a, row.y + 3, m - a, LANE_H - 6);
        ctx.globalAlpha = 1;
      }
      ctx.fillStyle = TRANSFER_COLOR;
      ctx.fillRect(m, row.y + 3, Math.max(b - m, 1), LANE_H - 6);
      const c = this.data.collectives[cid];
      if (c && c.last_rank === row.rank.rank && c.late_by_ns > 0) { // arrived last: a marker at its arrival
        ctx.fillStyle = WAIT_COLOR;
        ctx.beginPath();
        ctx.moveTo(a, row.y + 1);
        ctx.lineTo(a + 6, row.y + 1);
        ctx.lineTo(a, row.y + 8);
        ctx.fill();
      }
      if (sel && cid === sel.id) {
        ctx.strokeStyle = t.selection;
        ctx.lineWidth = 2;
        ctx.strokeRect(a + 1, row.y + 2, Math.max(b - a - 2, 1), LANE_H - 4);
        ctx.lineWidth = 1;
      }
    }
  }

  // the selected collective across its ranks: each rank's arrival joined to the instant the last
  // rank arrived (when the transfer starts on every rank)
  drawLinks(ctx, rows, sel, t) {
    const lanes = rows.filter((r) => r.lane === "collectives");
    let start = -Infinity;
    const marks = [];
    for (const row of lanes) {
      const s = row.rank.collectives.find((c) => c[3] === sel.id);
      if (!s) continue;
      start = Math.max(start, s[1]);
      marks.push({ y: row.y + LANE_H / 2, x: this.x(s[0]) });
    }
    if (!marks.length) return;
    const xs = this.x(start);
    ctx.strokeStyle = t.selection;
    ctx.setLineDash([4, 3]);
    ctx.beginPath();
    ctx.moveTo(xs + 0.5, RULER_H);
    ctx.lineTo(xs + 0.5, this.height);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.strokeStyle = WAIT_COLOR;
    for (const m of marks) {
      ctx.beginPath();
      ctx.arc(m.x, m.y, 3, 0, 2 * Math.PI);
      ctx.stroke();
      ctx.beginPath();
      ctx.moveTo(m.x, m.y);
      ctx.lineTo(xs, m.y);
      ctx.stroke();
    }
  }

  // --- interaction ---------------------------------------------------------------------------
  hit(x, y) {
    if (x < LABEL_W) return null;
    const row = this.rows().find((r) => y >= r.y && y < r.y + LANE_H);
    if (!row) return null;
    const t = this.ns(x);
    const slop = (this.t1 - this.t0) / (this.width - LABEL_W) * 3;
    if (row.lane === "collectives") {
      const s = row.rank.collectives.find((c) => t >= c[0] - slop && t <= c[2] + slop);
      return s ? { kind: "collective", rank: row.rank.rank, slice: s } : null;
    }
    const s = row.rank.compute.find((c) => t >= c[0] - slop && t <= c[0] + c[1] + slop);
    return s ? { kind: "compute", rank: row.rank.rank, slice: s } : null;
  }

  bind() {
    const c = this.canvas;
    let drag = null;
    c.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const box = c.getBoundingClientRect();
      const at = this.ns(Math.max(ev.clientX - box.left, LABEL_W));
      const f = Math.exp(ev.deltaY * 0.0015);
      this.zoom(at - (at - this.t0) * f, at + (this.t1 - at) * f);
    }, { passive: false });
    c.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, t0: this.t0, t1: this.t1, moved: false }; });
    window.addEventListener("mouseup", this.onUp = () => { setTimeout(() => { drag = null; }, 0); });
    c.addEventListener("mousemove", (ev) => {
      const box = c.getBoundingClientRect();
      if (drag && ev.buttons) {
        const dx = ev.clientX - drag.x;
        if (Math.abs(dx) > 2) drag.moved = true;
        const per = (drag.t1 - drag.t0) / (this.width - LABEL_W);
        this.zoom(drag.t0 - dx * per, drag.t1 - dx * per);
        return;
      }
      this.showTip(this.hit(ev.clientX - box.left, ev.clientY - box.top), ev.clientX - box.left, ev.clientY - box.top);
    });
    c.addEventListener("mouseleave", () => this.showTip(null));
    c.addEventListener("click", (ev) => {
      if (drag && drag.moved) return;
      const box = c.getBoundingClientRect();
      const h = this.hit(ev.clientX - box.left, ev.clientY - box.top);
      if (h && h.kind === "collective") this.select(h.slice[3], false);
      else if (!h) this.select(null, false);
    });
    c.addEventListener("dblclick", () => this.zoom(0, Math.max(this.data.span_ns, 1)));
    window.addEventListener("resize", this.onResize = () => this.resize());
  }

  zoom(t0, t1) {
    const span = Math.max(this.data.span_ns, 1);
    const width = Math.min(Math.max(t1 - t0, 100), span * 1.2);
    t0 = Math.max(-span * 0.1, Math.min(t0, span * 1.1 - width));
    this.t0 = t0;
    this.t1 = t0 + width;
    this.draw();
  }

  showTip(h, x, y) {
    if (!h) { this.tip.style.display = "none"; return; }
    let text;
    if (h.kind === "collective") {
      const [arrive, transfer, end, cid] = h.slice;
      const c = this.data.collectives[cid] || {};
      text = `${c.kind} #${c.seq} · group ${c.group} · ${fmtBytes(c.bytes)} ${c.algorithm}\n`
        + `rank ${h.rank} waited ${fmtTime(transfer - arrive)}, transfer ${fmtTime(end - transfer)}`
        + (c.last_rank === h.rank && c.late_by_ns > 0 ? `\narrived last (by ${fmtTime(c.late_by_ns)})` : "");
    } else {
      const [start, dur, name] = h.slice;
      text = `${this.data.names[name]} · rank ${h.rank}\n${fmtTime(dur)} at ${fmtTime(start)}`;
    }
    this.tip.textContent = text;
    this.tip.style.display = "block";
    this.tip.style.left = `${Math.min(x + 12, this.width - 260)}px`;
    this.tip.style.top = `${y + 14}px`;
  }

  select(cid, frame) {
    this.selected = cid;
    replaceQuery({ c: cid }); // the URL keeps the selection
    if (cid !== null && frame) {
      const c = this.data.collectives[cid];
      const times = Object.values(c.arrivals);
      const a = Math.min(...times);
      const b = Math.max(...times) + c.duration_ns;
      const pad = Math.max((b - a) * 0.6, 2000);
      this.zoom(a - pad, b + pad);
    } else {
      this.draw();
    }
    this.tables.collectives.render();
    this.renderDetail();
  }

  renderDetail() {
    const d = this.data;
    if (this.selected === null) {
      fill(this.detail, el("p.muted", {}, "Select a collective (on the timeline or in the table) to see its ranks."));
      return;
    }
    const c = d.collectives[this.selected];
    const first = Math.min(...Object.values(c.arrivals));
    const rows = Object.entries(c.arrivals).map(([rank, at]) => ({
      rank: Number(rank), arrived: at - first, wait: c.waits[rank] ?? null, last: Number(rank) === c.last_rank && c.late_by_ns > 0,
      __key: rank,
    }));
    const table = new DataTable({
      columns: [
        { key: "rank", title: "rank", format: (v, r) => el("span", {}, `rank ${v}`, r.last ? el("span.badge.small.last", {}, "arrived last") : null) },
        { key: "arrived", title: "arrived (after the first)", align: "right", format: fmtTime },
        { key: "wait", title: "waited for the others", align: "right", format: fmtTime },
      ],
      rows, sortKey: "rank", sortDesc: false, rowClass: (r) => (r.last ? "straggler" : "plain"),
    });
    fill(this.detail, el("div.card.run-collective", { "data-testid": "collective-detail" },
      el("h2", {}, `${c.kind} #${c.seq}`, el("span.muted", {}, ` · group ${c.group} (ranks ${c.group_ranks.join(", ")})`)),
      el("p", {}, `${fmtBytes(c.bytes)} · ${c.algorithm} · device time ${fmtTime(c.duration_ns)}`
        + (c.link_shared_by > 1 ? ` · links shared by ${c.link_shared_by} groups` : "")
        + (c.last_rank !== null && c.late_by_ns > 0 ? ` · rank ${c.last_rank} arrived last, ${fmtTime(c.late_by_ns)} after the next; the others waited ${fmtTime(c.others_wait_ns)} in all` : " · every rank arrived together")),
      c.missing.length ? el("p.warning", {}, `not seen on rank(s) ${c.missing.join(", ")}`) : null,
      table.node));
  }

  destroy() {
    window.removeEventListener("resize", this.onResize);
    window.removeEventListener("mouseup", this.onUp);
    if (window.__trnscope && window.__trnscope.run === this) window.__trnscope.run = null;
  }
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
