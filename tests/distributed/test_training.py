"""DDP and FSDP2 training of a tiny random-config HF Llama on 2 ranks: the single-process losses, no CPU
fallback. (4 ranks: the same commands with --nproc 4, see docs/distributed.md.)"""

import json

import pytest

from .conftest import ROOT, trnscope_run, worker_env

pytest.importorskip("transformers")
SCRIPT = ROOT / "examples/distributed/train_llama.py"


def _train(tmp_path, name, *launch, mode="ddp"):
    out = tmp_path / f"{name}.json"
    p = trnscope_run(*launch, SCRIPT, "--steps", 2, "--out", out, "--mode", mode,
                     env=worker_env(TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("single"), "single")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_two_rank_training_matches_one_process(single, tmp_path, mode):
    got = _train(tmp_path, mode, "--nproc", 2, mode=mode)
    assert got["world_size"] == 2 and got["fallbacks"] == 0 and single["fallbacks"] == 0
    assert got["losses"] == pytest.approx(single["losses"], rel=1e-5)
