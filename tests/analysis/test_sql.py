"""SQL over profiles (trnscope.analysis.sql, `trnscope query`): the tables agree with the analyses,
and the database is read-only and closed to the file system."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from trnscope.analysis import ProfileAnalysis, load_profile
from trnscope.analysis.sql import TABLES, ProfileDatabase, QueryError
from trnscope.cli.main import main


@pytest.fixture(scope="module")
def naive(rmsnorm):
    return rmsnorm["naive"]


@pytest.fixture(scope="module")
def db(naive):
    return ProfileDatabase(ProfileAnalysis(load_profile(naive)))


def test_tables_agree_with_the_analyses(db):
    a = db.analysis
    ops = {name: (calls, dev) for name, calls, dev in db.query("SELECT name, calls, device_self_ns FROM ops").rows}
    for row in a.ops.ops:
        assert ops[row.name] == (row.calls, row.device_self_ns)
    total = db.query("SELECT sum(dur_ns), count(*) FROM executions").rows[0]
    assert total == (a.device.device_time_ns, a.device.executions)
    # slice names resolved; the explorer's row ids; times from the first event
    mul = db.query("SELECT count(*), min(ts_ns) >= 0 FROM slices WHERE name = 'aten::mul'").rows[0]
    assert mul == (6, True)
    row, name = db.query("SELECT row, name FROM slices WHERE name = 'aten::pow' ORDER BY ts_ns LIMIT 1").rows[0]
    assert a.profile.trace.strings[int(a.profile.trace.slices.name[row])] == name
    # a join the analyses do not offer: each execution's launching runtime call
    launched = db.query("""SELECT e.name, s.name FROM executions e JOIN slices s ON s.row = e.launcher_row
                           WHERE NOT e.is_copy""").rows
    assert launched and {s for _, s in launched} == {"nrt_execute"}


def test_instructions_come_from_the_ntffs(db):
    per_neff = dict(db.query("SELECT neff_id, count(*) FROM instructions GROUP BY 1").rows)
    neffs = {n.neff_id: n.instruction_count for n in db.analysis.device.neffs}
    assert per_neff and all(per_neff[k] == neffs[k] for k in per_neff)
    ops = {op for (op,) in db.query("SELECT DISTINCT framework_op FROM instructions").rows}
    assert "aten::mul.Tensor" in ops
    # and the other tables are still there on the new connection
    assert db.query("SELECT count(*) FROM slices").rows[0][0] == len(db.analysis.profile.trace.slices)


@pytest.mark.parametrize("sql, problem", [
    ("DELETE FROM slices", "read-only"),
    ("CREATE TABLE x AS SELECT 1", "read-only"),
    ("COPY slices TO '/tmp/trnscope-sql-test.csv'", "read-only"),
    ("ATTACH '/tmp/x.db'", "read-only"),
    ("SELECT * FROM read_csv('/etc/passwd')", "disabled"),
    ("SELECT * FROM read_parquet('/tmp/*.parquet')", "disabled"),
    ("SELECT 1; SELECT 2", "one statement"),
    ("SELECT * FROM nope", "Tables: slices"),
    ("", "no query"),
    ("SELEC 1", "syntax"),
])
def test_refused_queries_say_why(db, sql, problem):
    with pytest.raises(QueryError, match=problem):
        db.query(sql)


def test_row_cap(db):
    result = db.query("SELECT * FROM slices", max_rows=3)
    assert len(result.rows) == 3 and result.truncated
    assert result.columns == list(TABLES["slices"][1])


def test_query_command(naive, capsys):
    buffer = io.StringIO()
    console = Console(file=buffer, width=120, force_terminal=False, color_system=None)
    assert main(["query", str(naive), "SELECT name, count(*) AS n FROM executions GROUP BY 1 ORDER BY 1"],
                console=console) == 0
    out = buffer.getvalue()
    assert "mul.Tensor_128x1024_1024" in out and "row(s)" in out
    assert main(["query", str(naive), "SELECT name FROM ops ORDER BY name LIMIT 2", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["columns"] == ["name"] and len(data["rows"]) == 2
    buffer.truncate(0)
    assert main(["query", str(naive), "DROP TABLE slices"], console=console) == 2
    assert "read-only" in buffer.getvalue()
    assert main(["query", str(naive), "--tables"], console=console) == 0
    assert "instructions" in buffer.getvalue()
