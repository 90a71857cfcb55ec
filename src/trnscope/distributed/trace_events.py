"""A rank's collectives in its framework trace, and PyTorch's ``distributedInfo``.

Each collective of the window becomes

* on the host thread that issued it: ``record_param_comms`` (category ``cpu_op``), with the argument
  names Kineto gives NCCL collectives ("Collective name", "In msg nelems", "Out msg nelems",
  "Group size", "dtype", "Process Group Name", "Process Group Description", "Process Group Ranks",
  "Rank", "Seq");
* on the NeuronCore's device process, lane ``Collectives`` (stream :data:`COLLECTIVE_STREAM`): a
  device activity of category ``kernel`` named as NCCL names its kernels
  (``ncclKernel_AllReduce_RING_Sum_float32 (neuron cc)``), so HTA classifies it as communication,
  from this rank's arrival (it waits inside, as an NCCL kernel waits for its peers) to the end, with
  the same arguments plus the algorithm, bytes, the wait, when the transfer started, the last rank
  to arrive and every rank's arrival;
* an ``ac2g`` flow between the two. The merged multi-rank view (:mod:`trnscope.analysis.ranks`) links
  one collective across ranks by (process group, sequence number).
"""

from __future__ import annotations

import zlib

from .records import records_between

COLLECTIVE_STREAM = 7  # the lane's stream id: > 0 (HTA's straggler analysis keeps only stream > 0)


def distributed_info() -> dict | None:
    """What ``torch.profiler`` records as ``distributedInfo`` when a process group exists."""
    import torch.distributed as dist

    from .state import rank_state

    if not (dist.is_available() and dist.is_initialized()):
        # the script has destroyed its process groups before the profile is written: what the
        # world group was when it was made
        return rank_state().info
    info = {"backend": dist.get_backend(), "rank": dist.get_rank(), "world_size": dist.get_world_size(),
            "pg_count": dist.get_pg_count(), "pg_config": dist.distributed_c10d._get_all_pg_configs()}
    rank_state().info = info
    return info


def add_to_document(view, doc: dict, device_pid) -> None:
    """Add distributedInfo, the rank's placement and its collectives to a framework trace document."""
    from .state import rank_state

    info = distributed_info()
    if info is None:
        return
    if info is not None and not doc.get("distributedInfo"):
        doc["distributedInfo"] = info
    st = rank_state()
    doc.setdefault("trnscope", {})["distributed"] = st.metadata()
    w = view.window
    close = w.close_em if w.close_em is not None else w.start_em
    recs = records_between(w.start_em, close, set(w.lane_cores()) | set(w.cores))
    events = doc["traceEvents"]
    lanes = set()
    for r in recs:
        pid = device_pid(w, r.device)
        if pid not in lanes:
            lanes.add(pid)
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": COLLECTIVE_STREAM,
                           "args": {"name": "Collectives (CC-cores)"}})
        tid = r.thread
        corr = (1 << 36) + r.seq * 64 + (zlib.crc32(r.pg_name.encode()) & 63)
        comm = {"Collective name": r.kind.replace("_", ""), "In msg nelems": r.in_nelems,
                "Out msg nelems": r.out_nelems, "Group size": len(r.group_ranks), "dtype": r.dtype,
                "Process Group Name": r.pg_name, "Process Group Description": r.pg_desc,
                "Process Group Ranks": list(r.group_ranks), "Rank": r.rank, "Seq": r.seq}
        events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": view.pid, "tid": tid,
                       "ts": view.ts(r.host_start_ns), "dur": view.dur(r.host_start_ns, r.host_end_ns),
                       "args": {**comm, "correlation": corr, "profiling_name": r.profiling_name}})
        dargs = {**comm, "device": r.device, "stream": COLLECTIVE_STREAM, "correlation": corr,
                 "profiling_name": r.profiling_name, "algorithm": r.algorithm, "bytes": r.nbytes,
                 "reduce_op": r.reduce_op, "arrival_ns": r.arrival_ns, "wait_ns": r.wait_ns,
                 "last_rank": r.last_rank, "arrivals_ns": list(r.arrivals_ns),
                 "device_time_ns": r.device_end_ns - r.device_start_ns, "link_shared_by": r.link_shared_by}
        if r.peer >= 0:
            dargs["peer"] = r.peer
        # as an NCCL kernel does, the activity starts when this rank's queue reaches it and waits there
        # for the others: a late rank's starts last, an early rank's is long
        ts_dev = view.ts(r.arrival_ns)
        dargs["transfer_start_ns"] = r.device_start_ns
        events.append({"ph": "X", "cat": "kernel", "name": r.kernel_name(), "pid": pid, "tid": COLLECTIVE_STREAM,
                       "ts": ts_dev, "dur": view.dur(r.arrival_ns, r.device_end_ns), "args": dargs})
        events.append({"ph": "s", "id": corr, "pid": view.pid, "tid": tid, "ts": view.ts(r.host_start_ns),
                       "cat": "ac2g", "name": "ac2g"})
        events.append({"ph": "f", "id": corr, "pid": pid, "tid": COLLECTIVE_STREAM, "ts": ts_dev, "cat": "ac2g",
                       "name": "ac2g", "bp": "e"})
    _rebase(doc, view.window.clockmap.offset)


def _rebase(doc: dict, own_offset: int) -> None:
    """Put the file on the run's shared time base (the epoch of emulated time 0 on rank 0): ``ts``
    becomes emulated us, the same instant on every rank, from one ``baseTimeNanoseconds``, which is
    what HTA compares across ranks (it reads ``ts`` as they are). ``own_offset``: the epoch offset
    the window put emulated time on (this process's own when the profile began before the process
    group).

    In whole ns: a ``ts`` relative to a base far from the events (weeks of us) has a float's 1 ns
    steps, so adding the shift in floats would round differently as the run's epoch offset changes
    (and the same run's timeline would move by 1 ns from run to run)."""
    from ..profiling import correlate
    from ..trace.timeunits import us_to_ns

    shared = correlate.SHARED_EPOCH_OFFSET_NS
    base = int(doc.get("baseTimeNanoseconds", 0) or 0)
    if shared is None or not base:
        return
    timed = [e for e in doc["traceEvents"] if "ts" in e]
    shift = base - own_offset
    for e, ns in zip(timed, us_to_ns([e["ts"] for e in timed]).tolist()):
        e["ts"] = round((ns + shift) / 1000.0, 3)
    doc["baseTimeNanoseconds"] = shared

