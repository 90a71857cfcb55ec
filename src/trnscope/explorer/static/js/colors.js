// Stable colours: the same name (or framework op) gets the same colour in every view and pane, so
// an op can be followed from the system trace into a device trace and across compared profiles.

const PALETTE = [
  "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7", "#9c755f",
  "#5f9ed1", "#c85200", "#8cd17d", "#a0cbe8", "#ffbe7d", "#86bcb6", "#d4a6c8", "#b6992d",
  "#499894", "#e15759", "#79706e", "#d37295",
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

const cache = new Map();

export function colorFor(text) {
  const key = String(text ?? "");
  let color = cache.get(key);
  if (color) return color;
  color = SPECIAL.get(key);
  if (!color) {
    let h = 2166136261;
    // names differing only in a trailing shape suffix (mul.Tensor_1024x2048) or a step number
    // (ProfilerStep#1, #2) share one colour: a new colour per step reads as a different kind of span
    const stem = key.replace(/[_.][0-9x_]+$/, "").replace(/#\d+$/, "");
    for (let i = 0; i < stem.length; i++) { h ^= stem.charCodeAt(i); h = Math.imul(h, 16777619); }
    color = PALETTE[(h >>> 0) % PALETTE.length];
  }
  cache.set(key, color);
  return color;
}

export function textColorOn(hex) {
  const n = parseInt(hex.slice(1), 16);
  const luminance = 0.299 * ((n >> 16) & 255) + 0.587 * ((n >> 8) & 255) + 0.114 * (n & 255);
  return luminance > 150 ? "#1b1b1b" : "#ffffff";
}
