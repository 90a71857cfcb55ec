import os
import subprocess
import sys

import pytest

from trnscope import hw


def test_every_constant_is_sourced():
    for spec in hw.TARGETS.values():
        sources = spec.sources()
        for name in ("tensor_clock_hz", "vector_clock_hz", "sbuf_bytes_per_partition", "hbm_bytes_per_s_per_core",
                     "dma_bytes_per_ns_per_engine", "min_ii_cycles", "dma_fixed_latency_ns", "neff_launch_latency_ns",
                     "psum_banks", "dma_engines", "cores_per_chip"):
            value, source, _ = sources[name]
            assert source.startswith("S"), (spec.name, name, source)


def test_published_facts():
    assert hw.TRN1.tensor_clock_hz == 2.8e9 and hw.TRN2.tensor_clock_hz == 2.4e9
    assert hw.TRN1.sbuf_bytes == 24 * hw.MiB and hw.TRN2.sbuf_bytes == 28 * hw.MiB
    assert hw.TRN2.psum_bytes == 2 * hw.MiB
    # 128x128 PEs x 2 FLOP x clock: 92 and 79 TFLOPS (S1, S2)
    assert round(hw.TRN1.peak_bf16_flops / 1e12) == 92
    assert round(hw.TRN2.peak_bf16_flops / 1e12) == 79
    assert hw.TRN1.dma_bytes_per_s_per_core == pytest.approx(272e9)


def test_default_is_trn2_and_set_instance():
    assert hw.get_spec().name == "trn2"
    assert hw.set_instance("trn1.32xlarge").name == "trn1"
    assert hw.get_spec() is hw.TRN1


def test_unknown_instance_names_choices():
    with pytest.raises(hw.UnknownInstanceError, match="trn1, trn2"):
        hw.set_instance("inf1")


def test_env_var_selects_instance():
    env = dict(os.environ, TRNSCOPE_INSTANCE="trn1")
    out = subprocess.run([sys.executable, "-c", "from trnscope import hw; print(hw.get_spec().name)"],
                         capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "trn1"


def test_replace_makes_a_what_if_copy():
    slow = hw.TRN2.replace(hbm_bytes_per_s_per_core=hw.TRN2.hbm_bytes_per_s_per_core / 4)
    assert slow.dma_effective_bytes_per_ns < hw.TRN2.dma_effective_bytes_per_ns
    assert hw.TRN2.hbm_bytes_per_s_per_core == 2.9e12 / 8
