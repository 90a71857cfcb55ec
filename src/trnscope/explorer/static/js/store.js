// Entries (profiles and traces) as last listed by the server, shared by the views.

import { api } from "./api.js";

let listing = null;
let pending = null;

export async function entries(force = false) {
  if (listing && !force) return listing;
  if (!pending) {
    pending = api.entries().then((data) => { listing = data; pending = null; return data; },
                                 (err) => { pending = null; throw err; });
  }
  return pending;
}

export function entryById(id) {
  return listing ? listing.entries.find((e) => e.id === id) || null : null;
}

export const KIND_LABEL = { neuron: "Neuron profile", kineto: "Kineto trace", parquet: "Saved trace" };
