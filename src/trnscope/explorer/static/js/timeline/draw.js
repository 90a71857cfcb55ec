// Canvas drawing for the timeline. Pure functions of (context, frame): no state of their own.
//
// A frame carries the geometry (rows, plot area, time->x mapping), the level-of-detail data last
// received, the string table and the selection. Slices are batched by colour into one path each,
// so a frame costs one fill per colour rather than one per slice; labels are drawn only where a
// slice is wide enough to hold text.

import { colorFor, textColorOn, theme } from "../colors.js";
import { fmtTime } from "../format.js";

export const LABEL_W = 260;
export const RULER_H = 26;
export const GROUP_H = 22;
export const ROW_H = 18;
export const LANE_PAD = 3;
export const COUNTER_H = 42;

const FONT = "11px system-ui, -apple-system, 'Segoe UI', sans-serif";
const SMALL = "10px system-ui, -apple-system, 'Segoe UI', sans-serif";

// First index in [lo, hi) whose value is >= x (values ascending).
function lowerBound(values, x, lo, hi) {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// ``collapsed``: a slice lane folded to its top level (any lane with nested levels folds on a
// click on its label)
export function laneHeight(lane, collapsed = false) {
  if (lane.kind === "counter") return COUNTER_H;
  return (collapsed ? 1 : lane.depth) * ROW_H + 2 * LANE_PAD;
}

export function drawFrame(ctx, f) {
  const { width, height } = f;
  f.theme = theme();
  ctx.clearRect(0, 0, width, height);
  ctx.fillStyle = f.theme.bg;
  ctx.fillRect(0, 0, width, height);
  ctx.font = FONT;
  ctx.textBaseline = "middle";
  drawGrid(ctx, f);
  for (const item of f.rows) {
    const y = item.y + RULER_H - f.scrollTop;
    if (y + item.h < RULER_H || y > height) continue;
    if (item.type === "group") drawGroupHeader(ctx, f, item, y);
    else drawLane(ctx, f, item, y);
  }
  drawRange(ctx, f);
  drawFlags(ctx, f);
  drawArrows(ctx, f);
  drawRuler(ctx, f);
  drawMatches(ctx, f);
  drawFlagHeads(ctx, f);
  drawHover(ctx, f);
}

function drawGrid(ctx, f) {
  ctx.strokeStyle = f.theme.grid;
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (const t of ticks(f.t0, f.t1, f.plotW)) {
    const x = Math.round(f.x(t)) + 0.5;
    ctx.moveTo(x, RULER_H);
    ctx.lineTo(x, f.height);
  }
  ctx.stroke();
}

function drawGroupHeader(ctx, f, item, y) {
  ctx.fillStyle = f.theme.groupBg;
  ctx.fillRect(0, y, f.width, GROUP_H);
  ctx.fillStyle = f.theme.groupLine;
  ctx.fillRect(0, y + GROUP_H - 1, f.width, 1);
  ctx.fillStyle = f.theme.groupInk;
  ctx.font = `600 ${FONT}`;
  ctx.fillText(`${item.collapsed ? "▸" : "▾"}  ${item.group.title}  (${item.count})`, 8, y + GROUP_H / 2);
  ctx.font = FONT;
}

function drawLane(ctx, f, item, y) {
  const lane = item.lane;
  ctx.save();
  ctx.beginPath();
  ctx.rect(LABEL_W, Math.max(y, RULER_H), f.plotW, item.h);
  ctx.clip();
  const data = f.data && f.data.lanes[lane.id];
  if (data) {
    if (lane.kind === "counter") drawCounter(ctx, f, lane, data, y, item.h);
    else drawSlices(ctx, f, lane, data, y, item.collapsed ? 1 : Infinity);
  }
  ctx.restore();
  // label column: title on the first row, subtitle under it when the lane has room; a lane with
  // nested levels has a fold marker (click the label to fold it to its top level)
  const t = f.theme;
  ctx.fillStyle = lane.runtime_only ? t.labelRuntime : t.label;
  ctx.fillRect(0, y, LABEL_W, item.h);
  ctx.fillStyle = t.ink;
  ctx.font = FONT;
  const foldable = lane.kind !== "counter" && lane.depth > 1;
  if (foldable) ctx.fillText(item.collapsed ? "▸" : "▾", 3, y + 11);
  const levels = item.collapsed ? `  (${lane.depth} levels)` : "";
  ctx.fillText(clip(ctx, lane.title + levels, LABEL_W - 18), 14, y + 11);
  if (lane.subtitle && item.h >= 32) {
    ctx.fillStyle = t.muted;
    ctx.font = SMALL;
    ctx.fillText(clip(ctx, lane.subtitle, LABEL_W - 18), 14, y + 24);
    ctx.font = FONT;
  }
  ctx.fillStyle = t.line;
  ctx.fillRect(0, y + item.h - 1, f.width, 1);
  ctx.fillRect(LABEL_W - 1, y, 1, item.h);
}

function drawSlices(ctx, f, lane, d, y, maxLevels = Infinity) {
  const n = d.ts.length;
  const k = f.plotW / (f.t1 - f.t0);
  const batches = new Map();
  const labels = [];
  // Rectangles are snapped to whole pixels, and runs of touching slivers (under 4 px) of one colour
  // on one row are merged: without a GPU the canvas is rasterised in software, where fewer,
  // pixel-aligned fillRects (Skia's fast path) cost a fraction of many anti-aliased ones.
  let runColor = null;
  let runTop = 0;
  let runLeft = 0;
  let runRight = 0;
  const flush = () => {
    if (runColor === null) return;
    let batch = batches.get(runColor);
    if (!batch) batches.set(runColor, (batch = []));
    batch.push(runLeft, runTop, runRight - runLeft, ROW_H - 2);
    runColor = null;
  };
  const levels = d.levels || [0, n];
  for (let l = 0; l < levels.length; l += 2) {
    if (d.depth[levels[l]] >= maxLevels) break; // a folded lane draws its top level only
    // within a level slices do not overlap and start in order: only the one before the first
    // start inside the window can reach into it
    const end = levels[l + 1];
    const from = Math.max(levels[l], lowerBound(d.ts, f.t0, levels[l], end) - 1);
    const to = lowerBound(d.ts, f.t1, from, end);
    for (let i = from; i < to; i++) drawOne(i);
  }
  flush();
  function drawOne(i) {
    const x0 = LABEL_W + (d.ts[i] - f.t0) * k;
    const w = d.dur[i] * k;
    if (x0 + w < LABEL_W || x0 > f.width) return;
    const left = Math.max(Math.floor(x0), LABEL_W - 2);
    const right = Math.min(Math.max(Math.round(x0 + w), left + 1), f.width + 2);
    const top = y + LANE_PAD + d.depth[i] * ROW_H;
    const color = f.colorOf(d.color[i]);
    if (right - left >= 4) {
      // wide enough to be told apart: its own rectangle, a pixel short so neighbours show a seam
      flush();
      runColor = color;
      runTop = top;
      runLeft = left;
      runRight = right - 1;
      flush();
    } else if (color === runColor && top === runTop && left <= runRight) {
      if (right > runRight) runRight = right;
    } else {
      flush();
      runColor = color;
      runTop = top;
      runLeft = left;
      runRight = right;
    }
    if (right - left > 34) labels.push(i, left, right, top, color);
  }
  for (const [color, rects] of batches) {
    ctx.fillStyle = color;
    for (let j = 0; j < rects.length; j += 4) ctx.fillRect(rects[j], rects[j + 1], rects[j + 2], rects[j + 3]);
  }
  ctx.font = FONT;
  for (let j = 0; j < labels.length; j += 5) {
    const i = labels[j];
    const [left, right, top, color] = [labels[j + 1], labels[j + 2], labels[j + 3], labels[j + 4]];
    const name = f.strings.get(d.name[i]) ?? "";
    const text = d.merged[i] > 1 ? `${name} (+${d.merged[i] - 1})` : name;
    ctx.fillStyle = textColorOn(color);
    ctx.fillText(clip(ctx, text, right - left - 6), left + 3, top + (ROW_H - 2) / 2 + 0.5);
  }
  if (d.instants) drawInstants(ctx, f, d.instants, y);
  const sel = f.selected;
  if (sel && sel.lane === lane.id && sel.depth < maxLevels) {
    const x0 = f.x(sel.ts);
    const w = Math.max(sel.dur * k, 2);
    ctx.strokeStyle = f.theme.selection;
    ctx.lineWidth = 2;
    ctx.strokeRect(x0, y + LANE_PAD + sel.depth * ROW_H - 1, w, ROW_H);
  }
}

function drawInstants(ctx, f, inst, y) {
  ctx.fillStyle = f.theme.instant;
  ctx.beginPath();
  for (let i = 0; i < inst.ts.length; i++) {
    const x = f.x(inst.ts[i]);
    if (x < LABEL_W || x > f.width) continue;
    ctx.moveTo(x, y + 1);
    ctx.lineTo(x + 3, y + 5);
    ctx.lineTo(x, y + 9);
    ctx.lineTo(x - 3, y + 5);
  }
  ctx.fill();
}

function drawCounter(ctx, f, lane, data, y, h) {
  // the first series is drawn; the others (same counter in other units) show in the tooltip
  const series = (lane.series || []).slice(0, 1);
  series.forEach((s, index) => {
    const d = data.series[String(s.id)];
    if (!d || !d.ts.length) return;
    const max = Math.max(s.max, 1e-12);
    const lo = Math.min(0, s.min);
    const scale = (v) => y + h - 3 - ((v - lo) / (max - lo)) * (h - 8);
    const color = index === 0 ? "#4e79a7" : colorFor(`${lane.title}/${s.name}`);
    ctx.fillStyle = color + "55";
    ctx.strokeStyle = color;
    ctx.lineWidth = 1;
    ctx.beginPath();
    let prevY = scale(d.v[0]);
    ctx.moveTo(Math.max(f.x(d.ts[0]), LABEL_W), y + h - 3);
    for (let i = 0; i < d.ts.length; i++) {
      const x = Math.max(f.x(d.ts[i]), LABEL_W);
      ctx.lineTo(x, prevY);
      const top = scale(d.max ? d.max[i] : d.v[i]);
      ctx.lineTo(x, top);
      prevY = scale(d.v[i]);
      ctx.lineTo(x, prevY);
    }
    ctx.lineTo(f.width, prevY);
    ctx.lineTo(f.width, y + h - 3);
    ctx.closePath();
    if (index === 0) ctx.fill();
    ctx.stroke();
  });
  ctx.font = SMALL;
  const top = series[0];
  // usage counters also carry their share of capacity: the headline a reader looks for
  const share = (lane.series || []).find((s) => s.name === "percent" && s !== top);
  if (top) {
    const label = `max ${formatValue(top.max, top.name)}${share ? ` (${formatValue(share.max, "percent")} of capacity)` : ""}`;
    // the peak reaches the top of the row, under the label: a backing keeps the label readable
    ctx.fillStyle = f.theme.backing;
    ctx.fillRect(LABEL_W + 2, y + 2, ctx.measureText(label).width + 4, 12);
    ctx.fillStyle = f.theme.muted;
    ctx.fillText(label, LABEL_W + 4, y + 8);
  }
  ctx.font = FONT;
}

export function formatValue(v, unit) {
  if (unit === "bytes" || unit === "rss" || String(unit).endsWith(" bytes")) return bytesShort(v);
  if (unit === "percent" || unit === "util") return `${Number(v).toFixed(1)}%`;
  if (unit === "GB/s") return `${Number(v).toFixed(1)} GB/s`;
  return Math.abs(v) >= 1000 ? Number(v).toExponential(2) : String(Math.round(v * 100) / 100);
}

function bytesShort(v) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function drawRange(ctx, f) {
  const r = f.range;
  if (!r) return;
  const a = Math.max(f.x(Math.min(r.t0, r.t1)), LABEL_W);
  const b = Math.min(f.x(Math.max(r.t0, r.t1)), f.width);
  if (b <= a) return;
  ctx.fillStyle = "rgba(66, 133, 244, 0.12)";
  ctx.fillRect(a, RULER_H, b - a, f.height - RULER_H);
  ctx.strokeStyle = "rgba(66, 133, 244, 0.9)";
  ctx.lineWidth = 1;
  ctx.strokeRect(a + 0.5, RULER_H + 0.5, b - a - 1, f.height - RULER_H - 1);
  const label = `${r.label ? `${r.label}: ` : ""}${fmtTime(Math.abs(r.t1 - r.t0))}`;
  ctx.fillStyle = f.theme.rangeInk;
  ctx.font = `600 ${FONT}`;
  ctx.fillText(label, Math.min(a + 6, f.width - 80), RULER_H + 12);
  ctx.font = FONT;
}

function drawArrows(ctx, f) {
  if (!f.arrows || !f.arrows.length) return;
  ctx.save();
  ctx.beginPath();
  ctx.rect(LABEL_W, RULER_H, f.plotW, f.height - RULER_H);
  ctx.clip();
  ctx.lineWidth = 1.5;
  for (const a of f.arrows) {
    const y0 = f.rowCenter(a.from.lane, a.from.depth);
    const y1 = f.rowCenter(a.to.lane, a.to.depth);
    if (y0 === null || y1 === null) continue;
    const x0 = f.x(a.from.ts + (a.fromEnd ? a.from.dur || 0 : 0)) + 1;
    const x1 = f.x(a.to.ts) + 1;
    ctx.strokeStyle = a.upstream ? "#c0392b" : "#1f6feb";
    ctx.fillStyle = ctx.strokeStyle;
    ctx.beginPath();
    ctx.moveTo(x0, y0);
    const bend = Math.max(24, Math.abs(x1 - x0) / 2);
    ctx.bezierCurveTo(x0 + bend, y0, x1 - bend, y1, x1, y1);
    ctx.stroke();
    // the curve arrives horizontally, so the head points right
    ctx.beginPath();
    ctx.moveTo(x1, y1);
    ctx.lineTo(x1 - 6.3, y1 - 3.1);
    ctx.lineTo(x1 - 6.3, y1 + 3.1);
    ctx.closePath();
    ctx.fill();
    ctx.beginPath();
    ctx.arc(x0, y0, 2.5, 0, 2 * Math.PI);
    ctx.fill();
  }
  ctx.restore();
}

function drawRuler(ctx, f) {
  const t = f.theme;
  ctx.fillStyle = t.ruler;
  ctx.fillRect(0, 0, f.width, RULER_H);
  ctx.fillStyle = t.rulerLine;
  ctx.fillRect(0, RULER_H - 1, f.width, 1);
  ctx.fillStyle = t.rulerInk;
  ctx.font = SMALL;
  const step = tickStep(f.t0, f.t1, f.plotW);
  for (const t of ticks(f.t0, f.t1, f.plotW)) {
    const x = Math.round(f.x(t)) + 0.5;
    ctx.fillRect(x, RULER_H - 7, 1, 6);
    ctx.fillText(fmtTime(t, step < 1 ? 4 : 3), x + 3, 9);
  }
  ctx.fillStyle = t.ruler;
  ctx.fillRect(0, 0, LABEL_W, RULER_H - 1);
  ctx.fillStyle = t.rulerInk;
  ctx.font = `600 ${SMALL}`;
  ctx.fillText(`window ${fmtTime(f.t1 - f.t0)}`, 10, RULER_H / 2);
  ctx.font = FONT;
}

function drawHover(ctx, f) {
  if (f.hoverX === null || f.hoverX < LABEL_W) return;
  ctx.fillStyle = f.theme.hover;
  ctx.fillRect(Math.round(f.hoverX), RULER_H, 1, f.height - RULER_H);
}

// Flags: a dashed line through the lanes and a pennant on the ruler (its note in the tooltip).
function drawFlags(ctx, f) {
  if (!f.flags || !f.flags.length) return;
  ctx.save();
  ctx.strokeStyle = f.theme.flag;
  ctx.lineWidth = 1;
  ctx.setLineDash([4, 3]);
  ctx.beginPath();
  for (const flag of f.flags) {
    const x = Math.round(f.x(flag.ts)) + 0.5;
    if (x < LABEL_W || x > f.width) continue;
    ctx.moveTo(x, RULER_H);
    ctx.lineTo(x, f.height);
  }
  ctx.stroke();
  ctx.restore();
}

function drawFlagHeads(ctx, f) {
  if (!f.flags || !f.flags.length) return;
  ctx.fillStyle = f.theme.flag;
  for (const flag of f.flags) {
    const x = Math.round(f.x(flag.ts)) + 0.5;
    if (x < LABEL_W || x > f.width) continue;
    ctx.fillRect(x - 0.5, 2, 1.5, RULER_H - 3);
    ctx.beginPath();
    ctx.moveTo(x + 1, 2);
    ctx.lineTo(x + 10, 6);
    ctx.lineTo(x + 1, 10);
    ctx.closePath();
    ctx.fill();
  }
}

// Search matches: a tick each on the ruler's bottom edge, so a reader sees where they are.
function drawMatches(ctx, f) {
  const m = f.matches;
  if (!m || !m.ts.length) return;
  ctx.fillStyle = f.theme.match;
  const from = Math.max(0, lowerBound(m.ts, f.t0 - (f.t1 - f.t0), 0, m.ts.length));
  let last = -1;
  for (let i = from; i < m.ts.length; i++) {
    const x = Math.round(f.x(m.ts[i]));
    if (x > f.width) break;
    if (x < LABEL_W || x === last) continue;
    last = x;
    ctx.fillRect(x, RULER_H - 6, 2, 5);
  }
}

export function tickStep(t0, t1, plotW) {
  const target = ((t1 - t0) / Math.max(plotW, 1)) * 110; // about one label per 110 px
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(target, 1e-9))));
  for (const m of [1, 2, 5, 10]) if (m * p >= target) return m * p;
  return 10 * p;
}

export function ticks(t0, t1, plotW) {
  const step = tickStep(t0, t1, plotW);
  const out = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1 && out.length < 200; t += step) out.push(t);
  return out;
}

// Text cut to fit ``width`` px, with an ellipsis. Widths are measured (and cached per string):
// labels are mostly repeated op names, so the cache makes this nearly free per frame.
const widths = new Map();

function textWidth(ctx, text) {
  const key = ctx.font + "|" + text;
  let w = widths.get(key);
  if (w === undefined) {
    w = ctx.measureText(text).width;
    if (widths.size > 20000) widths.clear();
    widths.set(key, w);
  }
  return w;
}

function clip(ctx, text, width) {
  if (width <= 6 || !text) return "";
  let full = textWidth(ctx, text);
  if (full <= width) return text;
  let n = Math.floor(text.length * (width / full)) - 1;
  while (n > 0) {
    const cut = `${text.slice(0, n)}…`;
    if (textWidth(ctx, cut) <= width) return cut;
    n -= Math.max(1, Math.floor(n / 8));
  }
  return "";
}

