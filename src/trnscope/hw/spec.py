"""Hardware specs as data: one frozen :class:`HardwareSpec` per NeuronCore generation.

Every number carries the source key of ../shared/docs/hardware.md (copied into docs/cost-model.md)
in the ``source`` metadata of its field; :func:`describe` prints them. Where sources disagree, the
field's ``note`` says which value was chosen and why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def sourced(value: Any, source: str, note: str = "") -> Any:
    """A dataclass field whose default is ``value``, tagged with its hardware.md source key."""
    return field(default=value, metadata={"source": source, "note": note})


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    instance: str
    neuroncore: str

    # --- chip / instance -------------------------------------------------------------------
    physical_cores_per_chip: int
    cores_per_chip: int  # logical NeuronCores visible to a process: physical_cores_per_chip / lnc

    # --- clocks (Hz) -----------------------------------------------------------------------
    tensor_clock_hz: float
    vector_clock_hz: float
    scalar_clock_hz: float
    gpsimd_clock_hz: float

    # --- memories ------------------------------------------------------------------------
    sbuf_bytes_per_partition: int  # per physical core (each has its own SBUF)
    hbm_bytes_per_core: int  # per logical core (the device a process sees)
    hbm_bytes_per_s_per_core: float  # per logical core

    # --- DMA ------------------------------------------------------------------------------
    dma_bytes_per_ns_per_engine: float

    # --- engine throughput multipliers -----------------------------------------------------
    vector_perf_mode: bool  # NC-v3 2x/4x BF16/FP16 modes on VectorE

    # fields below have the same value on both generations unless a spec overrides them
    lnc: int = sourced(
        1, "S23",
        "physical NeuronCores per logical NeuronCore (NEURON_LOGICAL_NC_CONFIG). The constants TRN1/TRN2 "
        "are physical-core specs (lnc=1); hw.logical_spec() derives the logical core's view.",
    )
    lnc_supported: tuple = sourced((1,), "S23,S45", "LNC degrees the target accepts: only 1 on trn1 (NCC_EARG001)")
    lnc_default: int = sourced(1, "S23", "the degree the Neuron runtime uses when NEURON_LOGICAL_NC_CONFIG is unset")
    partitions: int = sourced(128, "S1,S2", "SBUF and PSUM both have 128 partitions")
    pe_rows: int = sourced(128, "S1,S2", "TensorE 128x128 systolic array")
    pe_cols: int = sourced(128, "S1,S2")
    psum_bytes_per_partition: int = sourced(16 * KiB, "S1,S2", "2 MiB = 128 x 16 KiB")
    psum_banks: int = sourced(8, "S1,S10", "8 banks x 2 KiB (512 FP32) per partition")
    psum_bank_bytes: int = sourced(2 * KiB, "S10,S11")
    gemm_stationary_fmax: int = sourced(128, "S10", "stationary free size <= 128")
    gemm_moving_fmax: int = sourced(512, "S10", "moving free size <= 512 (one PSUM bank)")
    vector_free_max_sbuf: int = sourced(64 * KiB, "S1", "VectorE/ScalarE free size <= 64K elements in SBUF")
    vector_free_max_psum: int = sourced(4 * KiB, "S1", "<= 4K elements in PSUM")
    bn_stats_fmax: int = sourced(512, "S1")
    ap_max_dims: int = sourced(4, "S1", "free access patterns have up to 4 dimensions")

    min_ii_cycles: int = sourced(64, "S9", "MIN_II, 'roughly 64 engine cycles'")
    mm_init_latency_cycles: int = sourced(64, "S1", "MM_INIT_LATENCY; II = max(N, 64)")
    fp32_matmul_factor: int = sourced(4, "S1,S9", "FP32 matmul costs 4x BF16")
    ls_speedup: int = sourced(4, "S1,S4", "fast LoadStationary: II ~ N_stationary / 4")
    dependent_overhead_cycles: int = sourced(
        200,
        "S4,S1",
        "static overhead for an instruction that waited on another engine or is short (N < 128). "
        "S1 says ~100 cycles; the S4 measurement of dependent ACTIVATE on 1 element gives an II of "
        "264 cycles = MIN_II 64 + 200. The measured value is used.",
    )
    gpsimd_start_cycles: int = sourced(150, "S9", "GPSIMD_START ~ 150 (iota, affine_select)")
    stride_penalty: float = sourced(
        1.5, "S1", "minor-F stride > 16 B halves the access bandwidth: the instruction takes ~50% longer"
    )
    act_read_accumulator_cycles: int = sourced(64, "S1", "reading the ScalarE accumulator back")
    psum_vector_scalar_exclusive: str = sourced(
        "bank", "S1,S2",
        "what VectorE and ScalarE may not access at the same time in PSUM: 'psum' (all of it: NC-v2 "
        "'VectorE and ScalarE cannot access PSUM in parallel', S1), 'bank' (NC-v3: 'in parallel, as long "
        "as their accesses do not collide on the same PSUM bank', S2) or 'none'",
    )

    dma_engines: int = sourced(16, "S1,S2,S6", "16 DMA engines per NeuronCore")
    dma_queues_per_engine: int = sourced(16, "S6")
    dma_fixed_latency_ns: float = sourced(
        1300.0, "S5", "descriptor setup + semaphore-to-start latency, ~1300 ns cross-engine per transfer"
    )
    dma_descriptor_knee_bytes: int = sourced(
        2400,
        "S6 (derived)",
        "a descriptor (one contiguous row) occupies its DMA engine for max(bytes, knee)/rate. The S6 "
        "throughput-vs-bytes-per-partition figure is linear below ~2 KiB and flat above ~4 KiB; "
        "min(1, B/2400) reproduces all eleven digitized points within 0.05.",
    )
    hbm_read_write_same_bw: bool = True

    host_device_bytes_per_s: float = sourced(16e9, "S8", "host DRAM <-> device ~16 GB/s")
    host_transfer_fixed_ns: float = sourced(
        10_000.0,
        "S36 (derived)",
        "fixed cost of one host<->device copy; nothing is published as a constant. 10 us is the order "
        "of the runtime tensor_read/tensor_write events in system profiles and keeps small copies "
        "latency-bound as S36 observes.",
    )
    neff_launch_latency_ns: float = sourced(
        20_000.0,
        "S34,S33 (assumption)",
        "per-NEFF start overhead on the device, paid by every execution: from max(submit, device free) "
        "to the NEFF's first instruction, so executions queued back to back are this far apart too. "
        "Not published as a constant: S34 reports a 20 us cut of NEFF start overhead on trn3, so the "
        "start is at least tens of us; S33's 437 us gap includes framework/Python work that trnscope "
        "models as host time.",
    )
    throttle_idle_ns: float = sourced(3000.0, "S24", "TensorE restarts at ~50% after > 3 us idle")
    throttle_ramp_ns: float = sourced(3000.0, "S24", "and ramps to full rate over ~3 us")
    throttle_start_fraction: float = sourced(0.5, "S24")
    tensor_throttling: bool = False

    # --- derived -------------------------------------------------------------------------
    @property
    def sbuf_bytes(self) -> int:
        return self.partitions * self.sbuf_bytes_per_partition

    @property
    def psum_bytes(self) -> int:
        return self.partitions * self.psum_bytes_per_partition

    @property
    def dma_bytes_per_s_per_core(self) -> float:
        """DMA rate of the (logical) core: 16 engines per physical core."""
        return self.lnc * self.dma_engines * self.dma_bytes_per_ns_per_engine * 1e9

    @property
    def peak_bf16_flops(self) -> float:
        """Dense BF16 FLOP/s of one (logical) NeuronCore: 128x128 PEs x 2 FLOP x TensorE clock per
        physical core."""
        return self.lnc * self.pe_rows * self.pe_cols * 2 * self.tensor_clock_hz

    @property
    def peak_fp32_flops(self) -> float:
        return self.peak_bf16_flops / self.fp32_matmul_factor

    @property
    def hbm_bytes_per_ns_per_dma_engine(self) -> float:
        """HBM bandwidth share of one DMA engine when all engines stream (static fair share): the
        logical core's bandwidth over its physical cores' DMA engines."""
        return self.hbm_bytes_per_s_per_core / 1e9 / (self.dma_engines * self.lnc)

    @property
    def dma_effective_bytes_per_ns(self) -> float:
        """Rate of one DMA engine on an HBM transfer: its own rate or its HBM share, whichever is less."""
        return min(self.dma_bytes_per_ns_per_engine, self.hbm_bytes_per_ns_per_dma_engine)

    def clock_hz(self, engine: str) -> float:
        return {
            "tensor": self.tensor_clock_hz,
            "vector": self.vector_clock_hz,
            "scalar": self.scalar_clock_hz,
            "gpsimd": self.gpsimd_clock_hz,
            "sync": self.scalar_clock_hz,
        }[engine]

    def replace(self, **changes: Any) -> "HardwareSpec":
        """A copy with some constants changed (what-if studies, tests of the model's sensitivity)."""
        return dataclasses.replace(self, **changes)

    def sources(self) -> dict[str, tuple[Any, str, str]]:
        """field name -> (value, source key, note) for every sourced constant."""
        out: dict[str, tuple[Any, str, str]] = {}
        for f in dataclasses.fields(self):
            src = f.metadata.get("source") or _FIELD_SOURCES.get(self.name, {}).get(f.name, ("", ""))[0]
            note = f.metadata.get("note") or _FIELD_SOURCES.get(self.name, {}).get(f.name, ("", ""))[1]
            if src:
                out[f.name] = (getattr(self, f.name), src, note)
        return out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Sources of the per-generation fields (those without a shared default above).
_FIELD_SOURCES: dict[str, dict[str, tuple[str, str]]] = {}


def _register(spec: HardwareSpec, sources: dict[str, tuple[str, str]]) -> HardwareSpec:
    _FIELD_SOURCES[spec.name] = sources
    return spec
