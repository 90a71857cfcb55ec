// Decoding of the server's binary "columns" answers (explorer/columns.py has the layout): a JSON
// header, then every column as a typed array viewed in place over the response's bytes, so a
// level-of-detail answer needs no number parsing and no copying.

export const COLUMNS_TYPE = "application/x-trnscope-columns";
const MAGIC = 0x31435354; // "TSC1" read as a little-endian uint32

export function decodeColumns(buffer) {
  const view = new DataView(buffer);
  if (buffer.byteLength < 8 || view.getUint32(0, true) !== MAGIC) throw new Error("not a columns answer");
  const size = view.getUint32(4, true);
  const head = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 8, size)));
  const base = 8 + size + ((8 - ((8 + size) % 8)) % 8);
  const arrays = head.arrays.map(([offset, length, type]) =>
    (type === "i32" ? new Int32Array(buffer, base + offset, length) : new Float64Array(buffer, base + offset, length)));
  return revive(head.document, arrays);
}

function revive(value, arrays) {
  if (Array.isArray(value)) return value.map((v) => revive(v, arrays));
  if (value === null || typeof value !== "object") return value;
  if ("$array" in value) return arrays[value.$array];
  for (const key of Object.keys(value)) value[key] = revive(value[key], arrays);
  return value;
}

// GET a columns answer; resolves to { ok, status, data, buffer } (data: the error body when not ok).
export async function fetchColumns(url, init = {}) {
  const response = await fetch(url, { ...init, headers: { accept: COLUMNS_TYPE }, credentials: "same-origin" });
  return readColumns(response);
}

export async function readColumns(response) {
  const type = response.headers.get("content-type") || "";
  if (!response.ok || !type.startsWith(COLUMNS_TYPE)) {
    const body = await response.json().catch(() => null);
    return { ok: false, status: response.status, data: body, buffer: null };
  }
  const buffer = await response.arrayBuffer();
  return { ok: true, status: response.status, data: decodeColumns(buffer), buffer };
}
