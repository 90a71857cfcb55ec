"""trnscope summary / diff / export on real Kineto traces (no torch needed by these commands)."""

import json

from trnscope.cli.main import main
from trnscope.trace import read_kineto


def test_summary_of_a_cuda_trace(kineto_dir, capsys):
    path = kineto_dir / "critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"
    assert main(["summary", str(path), "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "Operators" in out and "executions" in out


def test_summary_json(kineto_dir, capsys):
    assert main(["summary", str(kineto_dir / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"headline", "device", "recommendations", "ops"} <= set(data)


def test_diff_of_control_and_test_runs(kineto_dir, capsys):
    assert main(["diff", str(kineto_dir / "trace_diff_control_control.json.gz"),
                 str(kineto_dir / "trace_diff_test_test.json.gz"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"] and data["ops"]
    assert {op["status"] for op in data["ops"]} <= {"both", "added", "removed"}


def test_export_round_trips(kineto_dir, tmp_path):
    src = kineto_dir / "critical_path_cuda_event_sync_multi_stream_event_sync_trace.json.gz"
    out = tmp_path / "combined.json.gz"
    assert main(["export", str(src), "-o", str(out)]) == 0
    assert len(read_kineto(out).slices) == len(read_kineto(src).slices)


def test_missing_profile_is_a_clear_error(capsys, tmp_path):
    assert main(["summary", str(tmp_path / "nope")]) == 2
    assert "no such profile or trace" in capsys.readouterr().out
