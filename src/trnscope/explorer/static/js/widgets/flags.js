// Flags and notes on a profile's timelines, saved by the server in a file beside the profile
// (explorer/notes.py). One store per profile, shared by its system trace and device traces; each
// flag belongs to one view ("system" or "device/<neff>/<nc>") and sits at a time on its axis.

import { api } from "../api.js";
import { el, fill, fmtTime } from "../format.js";

const stores = new Map();

// The flags of profile ``entryId`` (one store per page, loaded once).
export function flagStore(entryId) {
  let store = stores.get(entryId);
  if (!store) {
    store = new FlagStore(entryId);
    stores.set(entryId, store);
    store.load();
  }
  return store;
}

export class FlagStore {
  constructor(entryId) {
    this.entryId = entryId;
    this.flags = [];
    this.listeners = new Set();
    this.status = "";
    this.file = "";
  }

  async load() {
    try {
      const doc = await api.notes(this.entryId);
      this.flags = doc.flags;
      this.file = doc.file;
    } catch (err) {
      this.status = `flags not loaded: ${err.message}`;
    }
    this.changed();
  }

  of(view) {
    return this.flags.filter((f) => f.view === view).sort((a, b) => a.ts - b.ts);
  }

  add(view, { ts, row = null }, note = "") {
    const flag = { id: `f${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`, view, ts, note, row };
    this.flags.push(flag);
    this.save();
    return flag;
  }

  update(id, note) {
    const flag = this.flags.find((f) => f.id === id);
    if (!flag || flag.note === note) return;
    flag.note = note;
    this.save(400);
  }

  remove(id) {
    this.flags = this.flags.filter((f) => f.id !== id);
    this.save();
  }

  save(delay = 0) {
    this.changed();
    clearTimeout(this.timer);
    this.timer = setTimeout(async () => {
      this.status = "saving…";
      this.notify();
      try {
        const doc = await api.saveNotes(this.entryId, { flags: this.flags });
        this.file = doc.file;
        this.status = `saved in ${doc.file}`;
      } catch (err) {
        this.status = `not saved: ${err.message}${err.hint ? ` (${err.hint})` : ""}`;
      }
      this.notify();
    }, delay);
  }

  subscribe(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }
  changed() { this.notify(); }
  notify() { for (const fn of this.listeners) fn(this); }
}

// The toolbar's "Flags (n)" drop-down for one view: each flag's time (click: go there), its note
// (edited in place, saved as typed) and a delete button.
export function flagsMenu(store, view, { onJump }) {
  const list = el("div.flag-list");
  const summary = el("summary", { title: "Flags and notes on this timeline, saved beside the profile" }, "Flags");
  const status = el("p.muted.flag-status");
  const menu = el("details.tl-flags", {}, summary, el("div.flag-menu", {}, list, status));
  let focusId = null;
  const render = () => {
    const flags = store.of(view);
    summary.textContent = `Flags (${flags.length})`;
    status.textContent = store.status || (store.file ? `Kept in ${store.file} beside the profile` : "");
    if (document.activeElement && list.contains(document.activeElement) && !focusId) return; // typing
    fill(list, flags.length ? flags.map((flag) => el("div.flag-item", { "data-id": flag.id },
      el("a.link", { href: "#", title: "Show this time", onclick: (e) => { e.preventDefault(); onJump(flag); } }, `⚑ ${fmtTime(flag.ts)}`),
      el("input.flag-note", { type: "text", value: flag.note, placeholder: "note…", "aria-label": "Note",
        oninput: (e) => store.update(flag.id, e.target.value) }),
      el("button.small.flag-delete", { title: "Delete this flag", onclick: () => store.remove(flag.id) }, "×")))
      : el("p.muted", {}, "No flags yet: ⚑ Flag (or M) puts one at the selected slice or under the pointer."));
    if (focusId) {
      const input = list.querySelector(`.flag-item[data-id="${focusId}"] input`);
      focusId = null;
      if (input) input.focus();
    }
  };
  const off = store.subscribe(render);
  render();
  return {
    node: menu,
    destroy: off,
    // a new flag: open the menu on its note
    added(flag) { menu.open = true; focusId = flag.id; render(); },
  };
}
