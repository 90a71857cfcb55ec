"""Launching short multi-process runs from tests: every spawn has a timeout, ranks are few, models tiny."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).parent / "workers"
SPAWN_TIMEOUT = 420  # s, per spawn: the machine the suite runs on may be shared


def worker_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TRNSCOPE_HOST_TIME", "modelled")
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = "1"
    # no persistent NEFF cache: a test's timeline does not depend on what the user's cache holds
    # (test_determinism.py turns it on, with a cache of its own, cold and warm)
    env["TRNSCOPE_DISABLE_NEFF_CACHE"] = "1"
    env.pop("TRNSCOPE_RANK_SLOWDOWN", None)
    env.pop("TRNSCOPE_LINK_SLOWDOWN", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd: list[str], env: dict, timeout: int = SPAWN_TIMEOUT) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} ran past {timeout} s:\n{exc.stdout}\n{exc.stderr}")


def torchrun(script: Path, nproc: int, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                str(script), *map(str, args)], env or worker_env())


def trnscope_run(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "trnscope", "run", *map(str, args)], env or worker_env())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
