// A sortable, filterable table. Columns: {key, title, format?, value?, align?, tip?, csv?}. Clicking
// a header sorts by it (again: reverses); rows can expand to show a detail node below them.
// toCSV() gives the rows as shown (filter and sort applied, none cut off) with raw values.

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

  // CSV of the visible rows: one column per table column, headed by its key (the API's field
  // name: units are in it, e.g. _ns), holding the raw value (a column's ``csv: (row) => value``
  // overrides; ``csv: false`` leaves it out), then ``extra`` columns [{key, value(row)}].
  toCSV(extra = []) {
    const columns = [
      ...this.columns.filter((c) => c.csv !== false).map((c) => ({ key: c.key, value: c.csv || ((row) => this.value(c, row)) })),
      ...extra,
    ];
    const lines = [columns.map((c) => csvCell(c.key)).join(",")];
    for (const row of this.visibleRows()) lines.push(columns.map((c) => csvCell(c.value(row))).join(","));
    return lines.join("\r\n") + "\r\n";
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

// RFC 4180 quoting. Text that a spreadsheet would run as a formula (=, +, -, @ first) gets a
// leading apostrophe: names come from trace files, which anyone can write.
function csvCell(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isFinite(value) ? String(value) : "";
  let text = Array.isArray(value) ? value.join(";") : String(value);
  if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

// Offer text as a file download (no server round trip: the table already has every row).
export function downloadText(text, filename, type = "text/csv") {
  const url = URL.createObjectURL(new Blob([text], { type: `${type};charset=utf-8` }));
  const link = el("a", { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
