"""The two emulated targets: trn1 (NeuronCore-v2) and trn2 (NeuronCore-v3, the default)."""

from __future__ import annotations

from .spec import GiB, KiB, HardwareSpec, _register

TRN1 = _register(
    HardwareSpec(
        name="trn1",
        instance="trn1.2xlarge",
        neuroncore="NeuronCore-v2",
        physical_cores_per_chip=2,
        cores_per_chip=2,
        tensor_clock_hz=2.8e9,
        vector_clock_hz=1.12e9,
        scalar_clock_hz=1.4e9,
        gpsimd_clock_hz=1.4e9,
        sbuf_bytes_per_partition=192 * KiB,
        hbm_bytes_per_core=16 * GiB,
        hbm_bytes_per_s_per_core=410e9,
        dma_bytes_per_ns_per_engine=17.0,
        vector_perf_mode=False,
        tensor_throttling=False,
        psum_vector_scalar_exclusive="psum",
    ),
    {
        "physical_cores_per_chip": ("S1", "Trainium: 2 NeuronCore-v2 per chip"),
        "cores_per_chip": ("S1,S21", "trn1.2xlarge = 1 chip = 2 NeuronCores"),
        "tensor_clock_hz": ("S1", "TensorE 2.8 GHz"),
        "vector_clock_hz": ("S1", "VectorE 1.12 GHz"),
        "scalar_clock_hz": ("S1", "ScalarE 1.4 GHz"),
        "gpsimd_clock_hz": ("S1", "GpSimdE 1.4 GHz"),
        "sbuf_bytes_per_partition": ("S1", "24 MiB = 128 x 192 KiB"),
        "hbm_bytes_per_core": ("S1 (derived)", "32 GiB per chip / 2 cores"),
        "hbm_bytes_per_s_per_core": ("S1,S19 (derived)", "820 GB/s per chip / 2 cores"),
        "dma_bytes_per_ns_per_engine": (
            "S5",
            "sources disagree: 27 GiB/s (S1), 27.2 GB/s theoretical (S6), 17 B/ns sustained (S5). The S5 "
            "figure is the sustained rate and matches the 272 GB/s per-core aggregate (S5, S6).",
        ),
        "vector_perf_mode": ("S2", "the 2x/4x VectorE modes are NC-v3 only"),
        "tensor_throttling": ("S24", "throttling is documented for Trn2/Trn3 only"),
        "psum_vector_scalar_exclusive": (
            "S1", "NeuronCore-v2: VectorE and ScalarE cannot access PSUM in parallel; the compiler serialises them",
        ),
    },
)

TRN2 = _register(
    HardwareSpec(
        name="trn2",
        instance="trn2.3xlarge",
        neuroncore="NeuronCore-v3",
        physical_cores_per_chip=8,
        cores_per_chip=8,
        tensor_clock_hz=2.4e9,
        vector_clock_hz=0.96e9,
        scalar_clock_hz=1.2e9,
        gpsimd_clock_hz=1.2e9,
        sbuf_bytes_per_partition=224 * KiB,
        hbm_bytes_per_core=12 * GiB,
        hbm_bytes_per_s_per_core=2.9e12 / 8,
        dma_bytes_per_ns_per_engine=23.0,
        vector_perf_mode=True,
        tensor_throttling=True,
        lnc_supported=(1, 2),
        lnc_default=2,
    ),
    {
        "physical_cores_per_chip": ("S2", "Trainium2: 8 NeuronCore-v3 per chip"),
        "cores_per_chip": (
            "S23",
            "8 at LNC=1; hw.logical_spec() gives the default LNC=2 view: two physical cores per logical "
            "core, 4 per chip",
        ),
        "lnc_supported": ("S23", "LNC can only be set to 1 or 2"),
        "lnc_default": ("S23", "LNC=2 is the default setting on Trainium2"),
        "tensor_clock_hz": ("S2", "TensorE 2.4 GHz"),
        "vector_clock_hz": ("S2", "VectorE 0.96 GHz"),
        "scalar_clock_hz": ("S2", "ScalarE 1.2 GHz"),
        "gpsimd_clock_hz": ("S2", "GpSimdE 1.2 GHz"),
        "sbuf_bytes_per_partition": ("S2", "28 MiB = 128 x 224 KiB"),
        "hbm_bytes_per_core": (
            "S2,S23 (derived)",
            "96 GiB per chip / 8 cores; four 24 GB HBM banks, each shared by two physical cores (S23): "
            "a logical core at LNC=2 has its pair's bank, 24 GiB",
        ),
        "hbm_bytes_per_s_per_core": (
            "S20 (derived)",
            "2.9 TB/s per chip (S20; the NKI guide S2 says 3 TB/s: the chip page is taken) / 8 cores; a "
            "stack (725 GB/s) serves the two physical cores sharing its bank (S23)",
        ),
        "dma_bytes_per_ns_per_engine": ("S5", "23 B/ns sustained per engine (S6 gives 27.2 GB/s theoretical)"),
        "vector_perf_mode": ("S2", "2x/4x BF16/FP16 performance modes"),
        "tensor_throttling": ("S24", "TensorE starts at ~50% after idle and ramps over ~3 us"),
    },
)

TARGETS: dict[str, HardwareSpec] = {"trn1": TRN1, "trn2": TRN2}
DEFAULT_TARGET = "trn2"
