"""What a rank remembers of each collective while a profile records (one list per process)."""

from __future__ import annotations

from dataclasses import dataclass, field

# the NCCL-style operation names HTA, the Flight Recorder and Kineto's record_param_comms use
NCCL_KERNEL_OPS = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
                   "broadcast": "Broadcast", "reduce": "Reduce", "all_to_all": "SendRecv", "gather": "Gather",
                   "scatter": "Scatter", "barrier": "AllReduce", "send": "SendRecv", "recv": "SendRecv"}


@dataclass
class CollectiveRecord:
    seq: int                  # the process group's collective sequence number (1, 2, ...)
    kind: str                 # all_reduce | all_gather | reduce_scatter | ... | send | recv
    profiling_name: str       # Flight Recorder style, e.g. "nccl:all_reduce"
    pg_name: str
    pg_desc: str
    group_ranks: list[int]
    rank: int                 # global rank of this process
    device: int               # NeuronCore index in this process
    dtype: str
    in_nelems: int
    out_nelems: int
    nbytes: int               # the bytes the cost formula moved (see cost.collective_ns)
    algorithm: str
    reduce_op: str
    host_start_ns: int
    host_end_ns: int
    arrival_ns: int           # when this rank's queue reached the collective
    device_start_ns: int      # when every rank had reached it
    device_end_ns: int
    arrivals_ns: list[int] = field(default_factory=list)   # per group rank
    coalesced: int = 1
    peer: int = -1            # send/recv: the other rank (global)
    link_shared_by: int = 1   # concurrent rings on its most shared link (groups of its split)
    thread: int = 0

    @property
    def wait_ns(self) -> int:
        return self.device_start_ns - self.arrival_ns

    @property
    def last_rank(self) -> int:
        """Global rank that reached the collective last (ties: the lowest rank)."""
        if not self.arrivals_ns:
            return self.rank
        i = max(range(len(self.arrivals_ns)), key=lambda k: (self.arrivals_ns[k], -k))
        return self.group_ranks[i] if i < len(self.group_ranks) else i

    def kernel_name(self) -> str:
        """The device event's name: NCCL's kernel naming, so HTA's analyses count it as communication
        (``ncclKernel_<Op>_<ALGO>_<RedOp>_<dtype>``), marked as a Neuron collective."""
        op = NCCL_KERNEL_OPS.get(self.kind, self.kind)
        red = self.reduce_op.capitalize() if self.reduce_op else "Sum"
        return f"ncclKernel_{op}_{self.algorithm.upper()}_{red}_{self.dtype} (neuron cc)"


RECORDS: list[CollectiveRecord] = []


def records_between(start_ns: int, end_ns: int, devices=None) -> list[CollectiveRecord]:
    return [r for r in RECORDS if r.device_start_ns >= start_ns and r.device_end_ns <= end_ns
            and (devices is None or r.device in devices)]
