// SQL: one SELECT over the profile's tables (DuckDB on the server, read-only), the answer as a
// sortable table with CSV download. A result with a `row` column links each row to that slice in
// the system trace. The table list beside the editor says what can be asked.

import { api } from "../api.js";
import { el, fill, fmtCount } from "../format.js";
import { DataTable, downloadText } from "../widgets/table.js";
import { errorPanel, framedHash, go, loading, replaceQuery } from "./common.js";

const EXAMPLES = [
  ["Device time per NEFF", "SELECT name, count(*) AS calls, sum(dur_ns) AS device_ns, avg(dur_ns) AS avg_ns\nFROM executions GROUP BY name ORDER BY device_ns DESC"],
  ["Slowest ops' calls", "SELECT row, name, dur_ns, lane FROM slices\nWHERE cat = 'cpu_op' ORDER BY dur_ns DESC LIMIT 20"],
  ["Launch to start", "SELECT op, count(*) AS n, avg(ts_ns - submit_ns) AS avg_launch_to_start_ns\nFROM executions WHERE submit_ns >= 0 GROUP BY op ORDER BY 3 DESC"],
  ["Device time per source line", "SELECT source, source_found, count(*) AS executions, sum(dur_ns) AS device_ns\nFROM executions GROUP BY ALL ORDER BY device_ns DESC"],
  ["Instructions by op and engine", "SELECT framework_op, engine, count(*) AS instructions, sum(duration_ns) AS busy_ns\nFROM instructions GROUP BY ALL ORDER BY busy_ns DESC"],
];

export async function queryView(main, { id, query }) {
  const editor = el("textarea.sql-editor", { spellcheck: "false", "aria-label": "SQL query", rows: 6 },
    query.sql || EXAMPLES[0][1]);
  const run = el("button.primary.sql-run", { title: "Run (Ctrl+Enter)" }, "Run");
  const status = el("span.muted.sql-status");
  const results = el("div.sql-results");
  const tables = el("div.sql-tables", {}, loading("Tables…"));
  let last = null;
  const download = el("button.csv-download", { disabled: true, onclick: () => last && downloadText(last.toCSV(), "query.csv") }, "Download CSV");
  const execute = async () => {
    const sql = editor.value.trim();
    replaceQuery({ sql });
    status.textContent = "running…";
    run.disabled = true;
    try {
      const answer = await api.query(id, sql);
      last = resultTable(id, answer);
      fill(results, el("div.table-wrap", {}, last.node));
      status.textContent = `${fmtCount(answer.rows.length)} row(s)${answer.truncated ? " (first rows only: add LIMIT or narrow the query)" : ""}`;
      download.disabled = false;
    } catch (err) {
      last = null;
      download.disabled = true;
      status.textContent = "";
      fill(results, el("pre.sql-error", { role: "alert" }, err.message));
    } finally {
      run.disabled = false;
    }
  };
  run.addEventListener("click", execute);
  editor.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); execute(); } });
  fill(main,
    el("div.page-head", {}, el("div", {}, el("h1", {}, "SQL"),
      el("p.muted", {}, "One SELECT over this profile's tables (DuckDB, read-only). Ctrl+Enter runs it."))),
    el("div.sql-page", {},
      el("div.sql-main", {}, editor,
        el("div.toolbar", {}, run, download, el("span.muted", {}, "Examples:"),
          EXAMPLES.map(([label, sql]) => el("button.small.sql-example", { onclick: () => { editor.value = sql; execute(); } }, label)),
          status),
        results),
      tables));
  api.queryTables(id).then((t) => fill(tables, tableList(t.tables, editor)), (err) => fill(tables, errorPanel(err, { title: "No tables" })));
  if (query.sql) execute();
  return {};
}

function resultTable(id, answer) {
  const columns = answer.columns.map((name, i) => ({
    key: `c${i}`, title: name, align: /INT|DOUBLE|FLOAT|DECIMAL/i.test(answer.types[i]) ? "right" : "left",
    format: (v) => (v === null || v === undefined ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v)),
  }));
  const rows = answer.rows.map((r, index) => Object.fromEntries([["__key", index], ...r.map((v, i) => [`c${i}`, v])]));
  const rowColumn = answer.columns.indexOf("row");
  return new DataTable({
    columns, rows, className: "sql-table",
    // a slice row: open it in the system trace, framed with what it led to
    onRowClick: rowColumn >= 0 ? async (r) => {
      const row = r[`c${rowColumn}`];
      if (typeof row === "number" && row >= 0) go(framedHash(id, await api.source(id).details(row)));
    } : null,
  });
}

function tableList(tables, editor) {
  return el("div", {}, el("h3", {}, "Tables"), tables.map((t) => el("details.sql-table-doc", {},
    el("summary", { title: t.about }, el("code", {}, t.name), el("span.muted", {}, ` ${t.about}`)),
    el("table.mini", {}, t.columns.map((c) => el("tr", {},
      el("td", {}, el("a.link", { href: "#", onclick: (e) => { e.preventDefault(); editor.setRangeText(c.name, editor.selectionStart, editor.selectionEnd, "end"); editor.focus(); } }, el("code", {}, c.name))),
      el("td.muted", {}, c.about)))))));
}

export default queryView;
