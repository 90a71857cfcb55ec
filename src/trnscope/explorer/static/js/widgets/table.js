// A sortable, filterable table. Columns: {key, title, format?, value?, align?, tip?}. Clicking a
// header sorts by it (again: reverses); rows can expand to show a detail node below them.

import { clear, el } from "../format.js";

const MAX_ROWS = 1500;

export class DataTable {
  constructor({ columns, rows, sortKey = null, sortDesc = true, filter = null, expand = null, rowClass = null,
                onRowClick = null, className = "" }) {
    this.columns = columns;
    this.rows = rows;
    this.sortKey = sortKey;
    this.sortDesc = sortDesc;
    this.filterFn = filter;
    this.filterText = "";
    this.expand = expand;
    this.rowClass = rowClass;
    this.onRowClick = onRowClick;
    this.expanded = new Set();
    this.node = el(`table.data-table${className ? "." + className : ""}`);
    this.render();
  }

  setRows(rows) { this.rows = rows; this.render(); }
  setFilter(text) { this.filterText = text.trim().toLowerCase(); this.render(); }

  value(column, row) {
    return column.value ? column.value(row) : row[column.key];
  }

  visibleRows() {
    let rows = this.rows;
    if (this.filterFn && this.filterText) rows = rows.filter((r) => this.filterFn(r, this.filterText));
    if (this.sortKey) {
      const column = this.columns.find((c) => c.key === this.sortKey);
      const sign = this.sortDesc ? -1 : 1;
      rows = [...rows].sort((a, b) => {
        const va = this.value(column, a);
        const vb = this.value(column, b);
        if (va === vb) return 0;
        if (va === null || va === undefined) return 1;
        if (vb === null || vb === undefined) return -1;
        return (typeof va === "string" ? va.localeCompare(vb) : va - vb) * sign;
      });
    }
    return rows;
  }

  render() {
    const head = el("tr", {}, this.columns.map((c) => el(`th.${c.align || "left"}${c.key === this.sortKey ? ".sorted" : ""}`, {
      title: c.tip || "Sort", onclick: () => this.sortBy(c.key), "data-key": c.key,
    }, c.title, c.key === this.sortKey ? (this.sortDesc ? " ▾" : " ▴") : "")));
    const body = el("tbody");
    const rows = this.visibleRows();
    rows.slice(0, MAX_ROWS).forEach((row, index) => {
      const key = row.__key ?? row.name ?? index;
      const tr = el(`tr${this.rowClass ? "." + (this.rowClass(row) || "plain") : ""}`, {
        onclick: () => this.clicked(row, key),
      }, this.columns.map((c) => {
        const v = this.value(c, row);
        const shown = c.format ? c.format(v, row) : v;
        return el(`td.${c.align || "left"}`, { title: typeof shown === "string" ? shown : undefined }, shown ?? "–");
      }));
      if (this.expand) tr.classList.add("expandable");
      body.append(tr);
      if (this.expand && this.expanded.has(key)) {
        const detail = this.expand(row);
        if (detail) body.append(el("tr.detail-row", {}, el("td", { colspan: String(this.columns.length) }, detail)));
      }
    });
    if (rows.length > MAX_ROWS) {
      body.append(el("tr.more", {}, el("td", { colspan: String(this.columns.length) },
        `${rows.length - MAX_ROWS} more rows: use the filter to narrow them down`)));
    }
    if (!rows.length) body.append(el("tr.more", {}, el("td", { colspan: String(this.columns.length) }, "No rows")));
    clear(this.node).append(el("thead", {}, head), body);
  }

  sortBy(key) {
    if (this.sortKey === key) this.sortDesc = !this.sortDesc;
    else { this.sortKey = key; this.sortDesc = true; }
    this.render();
  }

  clicked(row, key) {
    if (this.onRowClick) this.onRowClick(row);
    if (!this.expand) return;
    if (this.expanded.has(key)) this.expanded.delete(key);
    else this.expanded.add(key);
    this.render();
  }
}
