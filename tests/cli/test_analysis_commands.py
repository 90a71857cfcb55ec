"""trnscope summary / diff / export / view as a user runs them (no torch needed by these commands)."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from trnscope.cli.main import main
from trnscope.trace import read_kineto

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from synthetic import KinetoBuilder  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _run(argv, width=100):
    """Run the CLI with a console of ``width`` columns and return what it printed."""
    import io

    buffer = io.StringIO()
    code = main(argv, console=Console(file=buffer, width=width, force_terminal=False, color_system=None))
    return code, buffer.getvalue()


def test_summary_of_a_cuda_trace(kineto_dir):
    path = kineto_dir / "critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"
    code, out = _run(["summary", str(path), "--top", "5"])
    assert code == 0
    assert "Operators (top 5 of" in out and "executions" in out and "Device use" in out
    assert "Largest idle gaps" in out and "Recommendations" in out and "evidence:" in out


def test_summary_json(kineto_dir, capsys):
    assert main(["summary", str(kineto_dir / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"headline", "device", "utilization", "idle", "memory", "recommendations", "ops"} <= set(data)


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_tables_fit_the_terminal(kineto_dir, width):
    code, out = _run(["summary", str(kineto_dir / "timeline_analysis_sampled_rank-0.json.gz")], width=width)
    assert code == 0
    for line in out.splitlines():
        assert len(line) <= max(width, 60), line
    # figures are never cut: every device time in the operator table ends with its unit
    ops = out.split("Operators")[1].split("Largest idle gaps")[0]
    assert "…" not in "".join(line[-12:] for line in ops.splitlines()[2:])


def test_names_are_text_not_markup(tmp_path):
    b = KinetoBuilder()
    b.op("train", 0, 2000)
    for i in range(40):
        b.op("[param|cuda]", i * 50, 20)
        b.kernel("[bold]k[/bold]", i * 50 + 30, 5, launch=i * 50 + 2)
    code, out = _run(["summary", str(b.write(tmp_path / "markup.pt.trace.json")), "--wide"])
    assert code == 0
    assert "[param|cuda]" in out and "[bold]k[/bold]" in out
    assert "[param|cuda] ×40" in out  # the recommendation's list of dispatching ops
    assert "Most dispatches:  ×" not in out


def test_summary_of_a_folder_summarises_each_profile(tmp_path, kineto_dir):
    for name in ("naive", "fused"):
        (tmp_path / name).mkdir()
        src = kineto_dir / "critical_path_cuda_event_sync_multi_stream_event_sync_trace.json.gz"
        (tmp_path / name / "rank0.pt.trace.json.gz").write_bytes(src.read_bytes())
    code, out = _run(["summary", str(tmp_path)])
    assert code == 0 and "2 profile(s) under" in out
    assert out.count("Operators (top") == 2
    code, out = _run(["summary", str(tmp_path / "naive")])  # the one named
    assert code == 0 and out.count("Operators (top") == 1
    (tmp_path / "empty").mkdir()
    code, out = _run(["summary", str(tmp_path / "empty")])
    assert code == 2 and "no profiles or traces in this folder" in " ".join(out.split())


def test_diff_of_control_and_test_runs(kineto_dir, capsys):
    assert main(["diff", str(kineto_dir / "trace_diff_control_control.json.gz"),
                 str(kineto_dir / "trace_diff_test_test.json.gz"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"] and data["ops"]
    assert {op["status"] for op in data["ops"]} <= {"both", "added", "removed"}


def test_diff_counts_are_readable(kineto_dir):
    code, out = _run(["diff", str(kineto_dir / "trace_diff_control_control.json.gz"),
                      str(kineto_dir / "trace_diff_test_test.json.gz")], width=140)
    assert code == 0
    assert "e+0" not in out and "9,450" in out and "15,632" in out  # executions, not 9.45e+03
    assert " pp" in out  # differences of percentages in percentage points


def test_export_round_trips(kineto_dir, tmp_path):
    src = kineto_dir / "critical_path_cuda_event_sync_multi_stream_event_sync_trace.json.gz"
    out = tmp_path / "combined.json.gz"
    assert main(["export", str(src), "-o", str(out)]) == 0
    assert len(read_kineto(out).slices) == len(read_kineto(src).slices)


def test_missing_profile_is_a_clear_error(tmp_path):
    code, out = _run(["summary", str(tmp_path / "nope")])
    assert code == 2 and "no such profile or trace" in " ".join(out.split())


def test_view_on_a_busy_port_fails_before_serving(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, out = _run(["view", str(tmp_path), "--port", str(port)])
    assert code == 2 and f"port {port} on 127.0.0.1 is already in use" in out and "--port 0" in out
    assert "serving" not in out


def test_help_and_summary_import_no_device_stack(kineto_dir):
    """--help answers without importing torch or the simulator; summary needs neither (nor pyarrow)."""
    probe = ("import sys, io, contextlib; from trnscope.cli.main import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    try: main(sys.argv[1:])\n"
             "    except SystemExit: pass\n"
             "print(sorted(m for m in ('torch', 'numba', 'ml_dtypes', 'pyarrow', 'pandas') if m in sys.modules))")
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    trace = kineto_dir / "critical_path_cuda_event_sync_multi_stream_event_sync_trace.json.gz"
    for argv in (["--help"], ["summary", str(trace)]):
        out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == "[]", (argv, out.stdout)


def test_key_averages_fit_the_terminal_and_wide_prints_pytorch_s_table():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from trnscope.cli.demo import print_key_averages

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        a = torch.randn(32, 32)
        with torch.profiler.record_function("[param|cuda]"):
            (a @ a).relu()
    import io

    narrow = io.StringIO()
    print_key_averages(Console(file=narrow, width=80, color_system=None), prof.key_averages(), "cpu", 8, wide=False)
    text = narrow.getvalue()
    assert "[param|cuda]" in text and all(len(line) <= 80 for line in text.splitlines())
    wide = io.StringIO()
    print_key_averages(Console(file=wide, width=80, color_system=None), prof.key_averages(), "cpu", 8, wide=True)
    rows = [line for line in wide.getvalue().splitlines() if "Self CPU %" in line]
    assert rows and len(rows[0]) > 80  # PyTorch's own header, unwrapped
