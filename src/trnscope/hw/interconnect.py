"""Instance topologies for multi-rank runs: chips per instance and the links between NeuronCores.

Each figure carries its source key (docs/cost-model.md, "Collectives"); a figure no source gives is
an assumption with its reasoning in the field's ``note``. Three kinds of hop join two ranks:

* ``chip``: two NeuronCores of one chip, through the chip's device memory (a DMA copy);
* ``neuronlink``: two chips of one instance, over NeuronLink;
* ``efa``: two instances, over the EFA network.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .spec import HardwareSpec

GB = 1e9
GiB = 1024 ** 3


def _fact(value: float, source: str, note: str = "") -> float:
    return field(default=value, metadata={"source": source, "note": note})


@dataclass(frozen=True)
class InstanceTopology:
    instance: str                       # e.g. "trn2.48xlarge"
    generation: str                     # the HardwareSpec name: "trn1" | "trn2"
    chips: int
    neuronlink_bytes_per_s_per_chip: float
    efa_bytes_per_s_per_instance: float
    neuronlink_source: str
    efa_source: str
    chips_source: str
    chip_hop_latency_ns: float = _fact(
        1300.0, "S5",
        "a copy between two NeuronCores of one chip is one DMA through device memory: the DMA's fixed "
        "descriptor-to-start latency, ~1300 ns (S5)")
    neuronlink_hop_latency_ns: float = _fact(
        2600.0, "S5 (assumption)",
        "no NeuronLink latency is published. A hop is a DMA to the neighbour chip's memory plus the "
        "remote semaphore that tells the receiver: taken as two DMA fixed latencies (2 x 1300 ns, S5)")
    efa_hop_latency_ns: float = _fact(
        15_000.0, "assumption",
        "no per-message EFA latency is published for Trn instances. 15 us is the order of a small "
        "RDMA message through the EFA provider (libfabric SRD) plus the runtime's proxy, an assumption")

    def sources(self) -> dict[str, tuple[float, str, str]]:
        out = {
            "chips": (self.chips, self.chips_source, ""),
            "neuronlink_bytes_per_s_per_chip": (self.neuronlink_bytes_per_s_per_chip, self.neuronlink_source,
                                                "taken as the bandwidth one rank drives into its ring neighbour"),
            "efa_bytes_per_s_per_instance": (self.efa_bytes_per_s_per_instance, self.efa_source,
                                             "the instance's whole EFA bandwidth, shared by its ranks"),
        }
        for f in dataclasses.fields(self):
            if f.metadata.get("source"):
                out[f.name] = (getattr(self, f.name), f.metadata["source"], f.metadata.get("note", ""))
        return out

    def replace(self, **changes) -> "InstanceTopology":
        return dataclasses.replace(self, **changes)


TRN1_32XLARGE = InstanceTopology(
    instance="trn1.32xlarge", generation="trn1", chips=16,
    neuronlink_bytes_per_s_per_chip=384 * GiB, efa_bytes_per_s_per_instance=800e9 / 8,
    chips_source="S21", neuronlink_source="S21 (NeuronLink-v2 device-to-device, 384 GiB/s per device)",
    efa_source="S21 (EFA 800 Gbps)")
TRN1N_32XLARGE = TRN1_32XLARGE.replace(
    instance="trn1n.32xlarge", neuronlink_bytes_per_s_per_chip=768 * GiB, efa_bytes_per_s_per_instance=1600e9 / 8,
    neuronlink_source="S21 (768 GiB/s per device)", efa_source="S21 (EFA 1,600 Gbps)")
TRN2_48XLARGE = InstanceTopology(
    instance="trn2.48xlarge", generation="trn2", chips=16,
    neuronlink_bytes_per_s_per_chip=1.28e12, efa_bytes_per_s_per_instance=3200e9 / 8,
    chips_source="S22 (16 Trainium2 chips, 4x4 2D torus)", neuronlink_source="S20 (NeuronLink 1.28 TB/s per chip)",
    efa_source="S22 (EFAv3 3.2 Tbps per trn2.48xlarge)")

TOPOLOGIES: dict[str, InstanceTopology] = {t.instance: t for t in (TRN1_32XLARGE, TRN1N_32XLARGE, TRN2_48XLARGE)}
DEFAULT_FOR_GENERATION = {"trn1": TRN1_32XLARGE, "trn2": TRN2_48XLARGE}


def topology_for(spec: HardwareSpec, instance: str | None = None) -> InstanceTopology:
    """The multi-chip instance of ``spec``'s generation: ``instance`` when it names one (e.g.
    ``$TRNSCOPE_INSTANCE=trn1n.32xlarge``), else the generation's 16-chip instance."""
    if instance:
        key = instance.strip().lower()
        if key in TOPOLOGIES:
            topo = TOPOLOGIES[key]
            if topo.generation != spec.name:
                raise ValueError(f"instance {instance!r} holds {topo.generation} chips but the emulated target "
                                 f"is {spec.name}: set TRNSCOPE_INSTANCE={topo.instance}")
            return topo
    return DEFAULT_FOR_GENERATION[spec.name]
