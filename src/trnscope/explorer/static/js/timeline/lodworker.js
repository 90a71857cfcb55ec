// Fetches and decodes level-of-detail answers off the main thread.
//
// Parsing a few hundred KB of JSON takes the main thread long enough to drop frames while the
// user zooms. Here the worker fetches, parses and turns each column into a typed array, then
// transfers the arrays' buffers to the page (no copy): the page only swaps in the new data.

const SLICE_COLUMNS = { ts: Float64Array, dur: Float64Array, depth: Int32Array, name: Int32Array, color: Int32Array,
                        row: Float64Array, merged: Int32Array };

self.onmessage = async (event) => {
  const { id, url } = event.data;
  try {
    const response = await fetch(url, { headers: { accept: "application/json" }, credentials: "same-origin" });
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      self.postMessage({ id, ok: false, status: response.status, body });
      return;
    }
    const transfer = [];
    const lod = body.initial_lod || body; // a layout may carry the first level of detail
    if (lod.lanes && !Array.isArray(lod.lanes)) for (const lane of Object.values(lod.lanes)) typed(lane, transfer);
    self.postMessage({ id, ok: true, data: body }, transfer);
  } catch (err) {
    self.postMessage({ id, ok: false, status: 0, body: { error: { problem: "the explorer server cannot be reached" } } });
  }
};

function typed(lane, transfer) {
  for (const [key, Type] of Object.entries(SLICE_COLUMNS)) {
    if (Array.isArray(lane[key])) {
      lane[key] = Type.from(lane[key]);
      transfer.push(lane[key].buffer);
    }
  }
  if (lane.instants) {
    lane.instants.ts = Float64Array.from(lane.instants.ts);
    transfer.push(lane.instants.ts.buffer);
  }
  for (const series of Object.values(lane.series || {})) {
    for (const key of ["ts", "v", "min", "max"]) {
      if (Array.isArray(series[key])) {
        series[key] = Float64Array.from(series[key]);
        transfer.push(series[key].buffer);
      }
    }
  }
}
