// Colours for slice names. The same name (or framework op) gets the same colour in every view and
// pane of a page, so an op can be followed from the system trace into a device trace and across
// compared profiles; and names get colours that are told apart: each name takes the next colour
// of a palette made for maximal distinctness (Trubetskoy's 20 distinct colours, less the greys
// and reds the timeline reserves), in the order the layout ranks them (the names with the most
// time first), then evenly spaced hues. Hashing names into a palette, as before, gave two of a
// profile's few ops the same light orange (addmm and gelu).

const PALETTE = [
  "#4363d8", "#f58231", "#3cb44b", "#911eb4", "#ffe119", "#42d4f4", "#f032e6", "#9a6324", "#469990",
  "#bfef45", "#000075", "#fabed4", "#808000", "#dcbeff", "#800000", "#ffd8b1", "#aaffc3", "#e6194b",
];
export const WAIT_COLOR = "#d62728"; // semaphore waits render red, as in Neuron Explorer
const SPECIAL = new Map([
  ["semaphore wait", WAIT_COLOR],
  ["semaphore", WAIT_COLOR],
  ["nc_exec_running", "#2f7d32"],
  ["nrt_execute", "#3f6fb5"],
  ["queue_wait", "#bdbdbd"],
  ["neff_compile", "#8e44ad"],
]);

const byStem = new Map(); // stem -> colour, in the order stems were first seen
const cache = new Map();

// names differing only in a trailing shape suffix (mul.Tensor_1024x2048) or a step number
// (ProfilerStep#1, #2) share one colour: a new colour per step reads as a different kind of span
function stemOf(key) {
  return key.replace(/[_.][0-9x_]+$/, "").replace(/#\d+$/, "");
}

function nth(index) {
  if (index < PALETTE.length) return PALETTE[index];
  // past the palette: hues a golden angle apart, two lightness levels
  const k = index - PALETTE.length;
  const hue = (k * 137.508 + 20) % 360;
  return hsl(hue, 62, k % 2 ? 62 : 46);
}

function hsl(h, s, l) {
  s /= 100; l /= 100;
  const f = (n) => {
    const k = (n + h / 30) % 12;
    const c = l - s * Math.min(l, 1 - l) * Math.max(-1, Math.min(k - 3, 9 - k, 1));
    return Math.round(c * 255).toString(16).padStart(2, "0");
  };
  return `#${f(0)}${f(8)}${f(4)}`;
}

// Give ``names`` (most important first) the next free colours, before anything is drawn.
export function rankColors(names) {
  for (const name of names || []) colorFor(name);
}

export function colorFor(text) {
  const key = String(text ?? "");
  let color = cache.get(key);
  if (color) return color;
  color = SPECIAL.get(key);
  if (!color) {
    const stem = stemOf(key);
    color = byStem.get(stem);
    if (!color) {
      color = nth(byStem.size);
      byStem.set(stem, color);
    }
  }
  cache.set(key, color);
  return color;
}

export function textColorOn(hex) {
  const n = parseInt(hex.slice(1), 16);
  const luminance = 0.299 * ((n >> 16) & 255) + 0.587 * ((n >> 8) & 255) + 0.114 * (n & 255);
  return luminance > 150 ? "#1b1b1b" : "#ffffff";
}

// --- light and dark themes -------------------------------------------------------------------
// The page's colours are CSS variables (explorer.css); the canvas reads the same ones, so both
// switch together. The choice is kept in localStorage; without one the system's preference holds.

const THEME_KEY = "trnscope.theme";

export function currentTheme() {
  return document.documentElement.dataset.theme === "dark" ? "dark" : "light";
}

export function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  try { localStorage.setItem(THEME_KEY, theme); } catch { /* private mode: not kept */ }
  canvasTheme = null;
  window.dispatchEvent(new CustomEvent("trnscope:theme", { detail: theme }));
}

export function initialTheme() {
  let saved = null;
  try { saved = localStorage.getItem(THEME_KEY); } catch { saved = null; }
  if (saved === "dark" || saved === "light") return saved;
  return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

let canvasTheme = null;

// The canvas's colours (read from the CSS variables once per theme).
export function theme() {
  if (canvasTheme) return canvasTheme;
  const css = getComputedStyle(document.documentElement);
  const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  canvasTheme = {
    bg: v("--tl-bg", "#ffffff"), grid: v("--tl-grid", "#f0f0f0"), groupBg: v("--tl-group-bg", "#eef1f5"),
    groupLine: v("--tl-group-line", "#d5dbe3"), groupInk: v("--tl-group-ink", "#233044"), label: v("--tl-label", "#ffffff"),
    labelRuntime: v("--tl-label-runtime", "#fafbfd"), ink: v("--ink", "#1d2633"), muted: v("--tl-muted", "#7b8794"),
    line: v("--tl-line", "#e3e7ec"), ruler: v("--tl-ruler", "#f7f8fa"), rulerLine: v("--tl-ruler-line", "#cfd6de"),
    rulerInk: v("--tl-ruler-ink", "#3b4754"), selection: v("--tl-selection", "#111111"), hover: v("--tl-hover", "rgba(0,0,0,0.25)"),
    backing: v("--tl-backing", "rgba(255, 255, 255, 0.85)"), instant: v("--tl-instant", "#37474f"),
    flag: v("--tl-flag", "#e8590c"), match: v("--tl-match", "#f5b400"), rangeInk: v("--tl-range-ink", "#1a4fa0"),
  };
  return canvasTheme;
}
