from __future__ import annotations

import gzip
import os
import shutil
import sys
from pathlib import Path

import pytest

# The RMSNorm profile generator lives with the analysis tests; both test folders share it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from rmsnorm_profiles import rmsnorm_profiles, torch_available  # noqa: E402
from stack_profile import source_lines_profile, training_step_profile, with_stack_compiled_profile  # noqa: E402

KINETO = Path(__file__).resolve().parents[2].parent / "shared/data/kineto-traces"
KINETO_COPIES = ("cpu_only", "critical_path_alexnet", "critical_path_cuda_event_sync", "timeline_analysis")


def shared_tmp(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def rmsnorm(tmp_path_factory) -> dict[str, Path]:
    if not torch_available():
        pytest.skip("recording profiles needs torch")
    return rmsnorm_profiles(shared_tmp(tmp_path_factory))


@pytest.fixture(scope="session")
def explorer_root(tmp_path_factory, rmsnorm) -> Path:
    """What `trnscope view ROOT` serves in these tests: the RMSNorm profiles, real Kineto traces
    and damaged files (each must get its own error while the rest keeps working)."""
    root = tmp_path_factory.mktemp("explorer-root")
    for variant in ("naive", "fused"):
        profile = rmsnorm[variant]
        shutil.copytree(profile, root / "rmsnorm" / variant / profile.parent.name / profile.name)
    # matmuls (nn.Linear forward, backward, SGD): NEFFs with TensorE FLOPs, for the roofline
    train = training_step_profile(shared_tmp(tmp_path_factory))
    shutil.copytree(train, root / "train" / train.parent.name / train.name)
    # torch.compile under a profiler schedule: ProfilerStep#1..3, for the per-step overview
    steps = with_stack_compiled_profile(shared_tmp(tmp_path_factory))
    shutil.copytree(steps, root / "steps" / steps.parent.name / steps.name)
    # the naive profile re-timed for trn1 (trnscope retime), to compare with its original
    from trnscope.profiling.retime import retime, target_spec

    retime(rmsnorm["naive"], root / "retimed" / "naive-on-trn1", target_spec("trn1"))
    # eager, compiled and NKI work recorded with with_stack=True from a script file: source lines
    lines, _ = source_lines_profile(shared_tmp(tmp_path_factory))
    shutil.copytree(lines, root / "lines" / lines.parent.name / lines.name)
    traces = root / "traces"
    traces.mkdir()
    if KINETO.is_dir():
        for prefix in KINETO_COPIES:
            for path in KINETO.glob(f"{prefix}*"):
                shutil.copy(path, traces / path.name)
    bad = root / "bad"
    bad.mkdir()
    (bad / "truncated.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph": "X", "na')
    (bad / "garbage_trace.json.gz").write_bytes(gzip.compress(b"\x00\x01 this is not json")[:-4])
    (bad / "notes.json").write_text('{"not": "a trace"}')  # ignored: not a trace by name or content
    broken = bad / "broken_profile" / "host_pid_1" / "20260101_000000_000000"
    shutil.copytree(rmsnorm["fused"], broken)
    ntff = next(broken.glob("*.ntff"))
    ntff.write_bytes(ntff.read_bytes()[:300])
    return root


@pytest.fixture(scope="module")
def client(explorer_root):
    """The explorer app serving ``explorer_root``, through Starlette's TestClient."""
    from starlette.testclient import TestClient

    from trnscope.explorer import create_app

    with TestClient(create_app([explorer_root])) as c:
        yield c


@pytest.fixture(scope="module")
def listing(client):
    response = client.get("/api/entries")
    assert response.status_code == 200
    return response.json()


@pytest.fixture(scope="session")
def line_marks(tmp_path_factory, explorer_root) -> dict[str, int]:
    """The line of each ``# line:<name>`` marker of the source-line profile's script."""
    return source_lines_profile(shared_tmp(tmp_path_factory))[1]
