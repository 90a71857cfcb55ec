// Formatting and tiny DOM helpers shared by every view.

// Formatters are also used as table cell formatters, called as (value, row): a non-numeric second
// argument means "default precision".
const precision = (digits, fallback) => (typeof digits === "number" ? digits : fallback);

export function fmtTime(ns, digits = 3) {
  digits = precision(digits, 3);
  if (ns === null || ns === undefined || Number.isNaN(ns)) return "–";
  const a = Math.abs(ns);
  if (a >= 1e9) return `${trim((ns / 1e9).toPrecision(digits + 1))} s`;
  if (a >= 1e6) return `${trim((ns / 1e6).toPrecision(digits + 1))} ms`;
  if (a >= 1e3) return `${trim((ns / 1e3).toPrecision(digits + 1))} µs`;
  return `${trim(Number(ns).toPrecision(Math.max(1, digits)))} ns`;
}

function trim(text) {
  return text.includes("e") ? text : text.replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
}

export function fmtBytes(bytes) {
  if (bytes === null || bytes === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(bytes);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${i === 0 ? v.toFixed(0) : v.toFixed(v >= 100 ? 0 : 1)} ${units[i]}`;
}

export function fmtPct(fraction, digits = 1) {
  digits = precision(digits, 1);
  if (fraction === null || fraction === undefined || Number.isNaN(fraction)) return "–";
  return `${(fraction * 100).toFixed(digits)}%`;
}

export function fmtPercentValue(percent, digits = 1) {
  digits = precision(digits, 1);
  if (percent === null || percent === undefined) return "–";
  return `${Number(percent).toFixed(digits)}%`;
}

export function fmtCount(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US");
}

export function fmtRatio(r) {
  if (r === null || r === undefined || !Number.isFinite(r)) return "–";
  return `${r >= 10 ? r.toFixed(0) : r.toFixed(2)}×`;
}

export function fmtSigned(value, fmt) {
  if (value === null || value === undefined) return "–";
  if (value === 0) return fmt(0);
  return (value > 0 ? "+" : "−") + fmt(Math.abs(value));
}

export function escapeHtml(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// el("div.card.error", {title: "x", onclick: fn}, child, "text", ...)
// Children may be arrays nested to any depth (a map returning [separator, node] pairs): an array
// left unflattened would be appended as its string, e.g. a link's href.
export function el(spec, attrs = {}, ...children) {
  const [tag, ...classes] = spec.split(".");
  const node = document.createElement(tag || "div");
  if (classes.length) node.className = classes.join(" ");
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "html") node.innerHTML = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

// Replace a node's children; null/undefined/false children are skipped (unlike Node.append).
export function fill(node, ...children) {
  clear(node);
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child);
  }
  return node;
}

// "MFU of FP32 39.3 TFLOP/s"; a mix of dtypes: "MFU of each kernel's dtype peak"
export function mfuLabel(h) {
  if (!h.mfu_peak) return "MFU";
  if (h.mfu_peak.startsWith("mixed")) return "MFU of each kernel's dtype peak";
  const rate = h.mfu_peak_flops_per_s ? ` ${+(h.mfu_peak_flops_per_s / 1e12).toFixed(1)} TFLOP/s` : "";
  return `MFU of ${h.mfu_peak} peak${rate}`;
}
