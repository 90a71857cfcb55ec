// Fetches and decodes level-of-detail answers off the main thread.
//
// Answers come as binary columns (see columns.js): the worker fetches and decodes them and
// transfers the one buffer all the typed arrays view to the page (no copy): the page only swaps in
// the new data, so zooming never waits for a parse on the main thread.

import { fetchColumns } from "./columns.js";

self.onmessage = async (event) => {
  const { id, url } = event.data;
  let answer;
  try {
    answer = await fetchColumns(url);
  } catch (err) {
    self.postMessage({ id, ok: false, status: 0, body: { error: { problem: "the explorer server cannot be reached" } } });
    return;
  }
  if (!answer.ok) self.postMessage({ id, ok: false, status: answer.status, body: answer.data });
  else self.postMessage({ id, ok: true, data: answer.data }, [answer.buffer]);
};
