"""``trnscope run --nproc``'s torchrun command line (no processes started)."""

import argparse
from pathlib import Path

import pytest

from trnscope.distributed import launch


def _args(**kw):
    p = argparse.ArgumentParser()
    p.add_argument("script", type=Path)
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.add_argument("--profile", type=Path)
    launch.add_arguments(p)
    argv = []
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return p.parse_args(argv + ["train.py", "--lr", "0.1"])


def test_one_node_is_standalone_and_workers_run_under_trnscope(tmp_path):
    a = _args(nproc=4, profile=tmp_path / "run")
    argv = launch.torchrun_argv(a)
    assert argv[:3] == ["--nproc-per-node", "4", "--standalone"]
    i = argv.index("--module")
    assert argv[i + 1:i + 5] == ["trnscope", "run", "--profile", str((tmp_path / "run").resolve())]
    assert argv[-3:] == [str(Path("train.py").resolve()), "--lr", "0.1"]
    assert launch.wanted(a)


def test_multi_node_options_pass_through_to_torchrun():
    a = _args(nproc=2, nnodes=2, node_rank=1, rdzv_backend="c10d", rdzv_endpoint="head:29400", rdzv_id="job7")
    argv = launch.torchrun_argv(a)
    assert "--standalone" not in argv
    for flag, value in (("--nnodes", "2"), ("--node-rank", "1"), ("--rdzv-backend", "c10d"),
                        ("--rdzv-endpoint", "head:29400"), ("--rdzv-id", "job7")):
        assert argv[argv.index(flag) + 1] == value
    from torch.distributed.run import get_args_parser

    parsed = get_args_parser().parse_args(argv)  # torchrun itself accepts the line
    assert parsed.nnodes == "2" and parsed.node_rank == 1 and parsed.module and parsed.training_script == "trnscope"


def test_plain_run_is_not_a_launch_and_rank_dirs_follow_rank(monkeypatch, tmp_path):
    assert not launch.wanted(_args())
    monkeypatch.setenv("RANK", "3")
    assert launch.rank_profile_dir(tmp_path) == tmp_path / "rank_3"


def test_a_bad_what_if_fails_before_any_process_starts(monkeypatch, tmp_path):
    from rich.console import Console

    monkeypatch.setenv("TRNSCOPE_RANK_SLOWDOWN", "rank3")
    from trnscope.distributed.whatif import WhatIfError

    with pytest.raises(WhatIfError, match="RANK:FACTOR"):
        launch.launch(_args(nproc=2), Console())
