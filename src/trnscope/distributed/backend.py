"""The ``neuron`` process group: bytes move through gloo, time is the emulated device's.

Registered as TorchNeuron registers its backend (``dist.Backend.register_backend("neuron", ...,
devices=["neuron"])``), as a Python ``ProcessGroup`` subclass as TorchNeuron's ``ProcessGroupNeuron``
is. Every collective

1. costs the host ``collective_submit_ns`` (the host-cost model) and reaches the rank's collective
   queue at ``arrival`` = max(submit + launch latency, the current stream's work, the queue's last
   collective): the collective engines run beside the compute engines;
2. exchanges ``arrival`` and the call's fingerprint with the group through gloo (emulator work, cut
   from the clock): the collective starts when the last rank arrives, lasts what the topology's
   cost formula says (:mod:`.cost`), and every rank computes the same start and end;
3. moves the data with gloo on zero-copy host views of the neuron tensors (emulator work);
4. returns a work whose ``wait()`` makes the current stream wait for the collective's end (device
   ordering, as NCCL's work does; the host does not block). Collectives nobody waited for are
   waited for at the end of the backward pass that issued them (DDP's reducer waits on their
   futures in C++, then copies the buckets into ``.grad``) and by the next optimizer step.

Errors: a collective whose ranks disagree on op, shape or dtype raises
:class:`.errors.CollectiveMismatchError` naming both ranks; a rank that died or is stuck makes the
others raise :class:`.errors.RankFailedError` naming it (within the group's timeout).
"""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroupGloo
from torch.futures import Future

from .errors import DistributedError, RankFailedError
from . import groups, signature as sig
from .records import RECORDS, CollectiveRecord
from .state import rank_state

BACKEND = "neuron"


class NeuronWork(dist._Work):
    """A collective's work: done on the host, ordered on the device by ``wait()``."""

    def __init__(self, pg: "ProcessGroupNeuron", core, end_ns: int, result) -> None:
        super().__init__()
        self._pg, self._core, self.end_ns, self._result = pg, core, end_ns, result
        self._waited = False
        self._fut: Future | None = None  # made when asked for (most works are only waited)
        pg._outstanding[id(self)] = self

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        if not self._waited:
            self._waited = True
            self._pg._outstanding.pop(id(self), None)
            if self._core is not None:
                self._core.stream_wait(self._core.current_stream, self.end_ns)
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self):
        return None

    def result(self):
        return self._result if isinstance(self._result, list) else [self._result]

    def get_future(self) -> Future:
        # DDP's reducer waits on this future in C++, where trnscope cannot see it; the end of the
        # backward pass and the optimizer step order such collectives (ProcessGroupNeuron.wait_outstanding)
        if self._fut is None:
            self._fut = Future()
            self._fut.set_result(self._result)
        return self._fut

    def synchronize(self) -> None:
        self.wait()


def _host(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over ``t``'s bytes (zero copy for neuron tensors)."""
    if t.device.type == "cpu":
        return t
    if t.device.type != BACKEND:
        raise DistributedError(f"the neuron process group got a tensor on {t.device}: move it to 'neuron' "
                               f"(or use a gloo group for CPU tensors)")
    return _host_view()(t)


def _host_view():
    global _HOST_VIEW
    if _HOST_VIEW is None:
        from ..device.memory import host_view

        _HOST_VIEW = host_view
    return _HOST_VIEW


_HOST_VIEW = None


class _Dense:
    """Host tensors gloo can use (contiguous); copies back into the original on ``finish``."""

    def __init__(self, tensors) -> None:
        self.views = [_host(t) for t in tensors]
        self.dense = [v if v.is_contiguous() else v.contiguous() for v in self.views]

    def finish(self) -> None:
        for v, d in zip(self.views, self.dense):
            if d is not v:
                v.copy_(d)


class ProcessGroupNeuron(dist.ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout: timedelta, global_ranks: list[int] | None = None) -> None:
        super().__init__(rank, size)
        self._store = store
        self._timeout = timeout
        self._gloo = ProcessGroupGloo(dist.PrefixStore("trnscope_gloo/", store), rank, size, timeout)
        self._seq = 0
        self._p2p_seq = itertools.count(1)
        self._outstanding: dict[int, NeuronWork] = {}  # works nobody has waited for yet
        self._backward_task = -1  # the backward pass (graph task) whose final callback will wait for them
        # the arrival exchange's buffers, reused by every collective (calls are serialised by _lock)
        self._mine = torch.zeros(sig.WIDTH, dtype=torch.int64)
        self._all = torch.zeros(size * sig.WIDTH, dtype=torch.int64)
        self._size = size
        self._mine_np = self._mine.numpy()
        self._ranks: list[int] | None = list(global_ranks) if global_ranks else None
        self._beside: list[tuple[int, ...]] | None = None  # the groups of this one's split (groups.siblings)
        self._lock = threading.RLock()
        self._state = rank_state()
        self._state.join(self._gloo, rank, size)  # the first group (the world): where every rank runs
        if rank == 0:
            groups.announce(store, self.ranks())

    # --- identity -----------------------------------------------------------------------------
    def getBackendName(self) -> str:
        return BACKEND

    # torch names a Python process group in its world map only (it skips _set_group_name for them)
    @property
    def group_name(self) -> str:
        return dist.distributed_c10d._world.pg_names.get(self, "unnamed")

    @property
    def group_desc(self) -> str:
        w = dist.distributed_c10d._world
        return "default_pg" if w.default_pg is self else "undefined"

    @property
    def name(self) -> str:
        return self.group_name

    def ranks(self) -> list[int]:
        if self._ranks is None:
            try:
                self._ranks = dist.get_process_group_ranks(self)
            except Exception:  # not registered yet (during init_process_group): identity
                self._ranks = list(range(self.size()))
        return self._ranks

    def __repr__(self) -> str:
        return f"ProcessGroupNeuron(rank={self.rank()}, size={self.size()})"

    # --- the one path every collective takes ----------------------------------------------------
    def _collective(self, kind: str, tensors: list, fingerprint: torch.Tensor | None, nbytes: int, run,
                    reduce_op: str = "", in_nelems: int = 0, out_nelems: int = 0, coalesced: int = 1,
                    check_fields=(1, 2, 3, 4, 5, 6), result=None):
        from .. import runtime
        from ..runtime.hostcost import host_costs

        with self._lock:
            self._seq += 1
            seq = self._seq
            core = self._core_of(tensors)
            clock = runtime.CLOCK
            host_start = clock.now()
            submit = clock.advance(host_costs().collective_submit_ns)
            arrival = self._arrival(core, submit)
            ranks = self.ranks()
            with clock.emulation():
                rows = self._exchange(sig.encode(arrival, seq, kind, fingerprint, reduce_op), kind, seq)
                sig.check(rows, ranks, self.name, check_fields)
                arrivals = [int(r[0]) for r in rows]
                start = max(arrivals)
                dur, algo, shared = self._state.duration(kind, nbytes, ranks, self._siblings())
                end = start + dur
                if core is not None:
                    core.cc_free_ns = max(core.cc_free_ns, end)
                self._gloo_run(run, kind, seq)
            host_end = clock.now()
            if core is not None and core.observed:
                RECORDS.append(CollectiveRecord(
                    seq=seq, kind=kind, profiling_name=f"nccl:{kind}", pg_name=self.name,
                    pg_desc=getattr(self, "group_desc", "") or "", group_ranks=list(ranks),
                    rank=dist.get_rank() if dist.is_initialized() else self.rank(), device=core.index,
                    dtype=sig.dtype_name(fingerprint.dtype) if fingerprint is not None else "none",
                    in_nelems=in_nelems, out_nelems=out_nelems, nbytes=nbytes, algorithm=algo, reduce_op=reduce_op,
                    host_start_ns=host_start, host_end_ns=host_end, arrival_ns=arrival, device_start_ns=start,
                    device_end_ns=end, arrivals_ns=arrivals, coalesced=coalesced, link_shared_by=shared,
                    thread=threading.get_native_id()))
            self._wait_after_backward()
            return NeuronWork(self, core, end, result if result is not None else tensors)

    def _wait_after_backward(self) -> None:
        """Inside a backward pass, order the collectives nobody waited for before what runs after it.
        DDP's reducer launches a bucket's all_reduce from an autograd hook and, at the end of the
        pass, waits on its future in C++ (which trnscope cannot see) before copying the bucket into
        ``.grad``: a final callback queued at the pass's first collective runs before DDP's (queued
        after its last bucket) and makes the current stream wait for every outstanding collective."""
        task = torch._C._current_graph_task_id()
        if task < 0 or task == self._backward_task:
            return
        from torch.autograd import Variable

        Variable._execution_engine.queue_callback(self.wait_outstanding)
        self._backward_task = task

    def _siblings(self) -> list[tuple[int, ...]]:
        """The other groups of this group's split, read once, at its first collective (emulator work)."""
        if self._beside is None:
            self._beside = groups.siblings(groups.known(self._store), self.ranks())
        return self._beside

    def _core_of(self, tensors):
        from .. import runtime

        for t in tensors:
            if isinstance(t, torch.Tensor) and t.device.type == BACKEND:
                return runtime.core(t.device.index or 0)
        return runtime.core(self._state.default_core())

    def _arrival(self, core, submit_ns: int) -> int:
        ready = submit_ns + int(core.spec.neff_launch_latency_ns)
        return max(ready, core.stream_done_ns(core.current_stream), core.cc_free_ns)

    def _exchange(self, row: list[int], kind: str, seq: int) -> list[list[int]]:
        self._mine_np[:] = row
        try:
            # torch's stub for ProcessGroupGloo lacks the collectives it has at runtime (from Backend)
            self._gloo._allgather_base(self._all, self._mine).wait()  # type: ignore[attr-defined]
        except RuntimeError as exc:
            raise self._who_failed(kind, seq, exc) from None
        return self._all.view(self._size, sig.WIDTH).tolist()

    def _gloo_run(self, run, kind: str, seq: int) -> None:
        try:
            run()
        except RuntimeError as exc:
            raise self._who_failed(kind, seq, exc) from None

    def _who_failed(self, kind: str, seq: int, exc: Exception) -> Exception:
        """gloo failed (a peer closed its connection, or the timeout passed): ask the store which ranks
        are still here, each survivor leaving its mark; the ranks without one are named."""
        ranks = self.ranks()
        key = f"trnscope_failed/{seq}/"
        try:
            self._store.set(key + str(self.rank()), "1")
            deadline = time.monotonic() + min(10.0, max(1.0, self._timeout.total_seconds() / 4))
            missing = list(range(self.size()))
            while time.monotonic() < deadline:
                missing = [g for g in range(self.size()) if not self._store.check([key + str(g)])]
                if not missing:
                    break
                time.sleep(0.05)
        except Exception:  # the store itself went away with rank 0
            missing = [0] if self.rank() != 0 else []
        names = ", ".join(f"rank {ranks[g] if g < len(ranks) else g}" for g in missing) or "a rank"
        return RankFailedError(
            f"{names} did not complete {kind} #{seq} on process group {self.name!r}: its process died or is stuck "
            f"(rank {ranks[self.rank()] if self.rank() < len(ranks) else self.rank()} stops here; gloo said: "
            f"{str(exc).splitlines()[0][:200]}). Look at that rank's own output for the cause.")

    def _gloo_allreduce(self, t: torch.Tensor, op, opts=None) -> None:
        """gloo's all_reduce with the ops it lacks: AVG (a SUM, divided by the group size) and
        PREMUL_SUM (multiplied by the op's factor first). ``opts``: the caller's options, used as they
        are for the ops gloo has."""
        name = sig.redop_name(op)
        if not isinstance(opts, dist.AllreduceOptions) or name in ("avg", "premul_sum"):
            opts = dist.AllreduceOptions()
            opts.reduceOp = dist.ReduceOp.SUM if name in ("avg", "premul_sum") else op
        if name == "premul_sum":
            t.mul_(_premul_factor(op))
        self._gloo.allreduce([t], opts).wait()  # type: ignore[attr-defined]  # as in _exchange: torch's stub
        if name == "avg":
            if t.is_floating_point() or t.is_complex():
                t.div_(self.size())
            else:
                t.floor_divide_(self.size())

    def wait_outstanding(self) -> None:
        """Order every collective nobody waited for before the current stream's next work."""
        works, self._outstanding = list(self._outstanding.values()), {}
        for w in works:
            w.wait()

    # --- collectives ----------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        return self._allreduce(tensors, opts, coalesced=len(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        if opts is None:
            opts = dist.AllreduceCoalescedOptions()
        return self._allreduce(tensors, opts, coalesced=len(tensors))

    def _allreduce(self, tensors, opts, coalesced):
        d = _Dense(tensors)
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        red = sig.redop_name(opts.reduceOp)

        def run():
            for t in d.dense:  # one gloo call per tensor (gloo's coalesced form needs equal dtypes)
                self._gloo_allreduce(t, opts.reduceOp, opts)
            d.finish()
        fp = tensors[0] if len(tensors) == 1 else _flat_fingerprint(tensors)
        n = sum(t.numel() for t in tensors)
        return self._collective("all_reduce", tensors, fp, nbytes, run, red, n, n, coalesced)

    def allgather(self, output_tensors, input_tensors, opts=None):
        outs = [t for lst in output_tensors for t in lst]
        di, do = _Dense(input_tensors), _Dense(outs)
        it = iter(do.dense)
        nested = [[next(it) for _ in lst] for lst in output_tensors]

        def run():
            self._gloo.allgather(nested, di.dense).wait()
            do.finish()
        nbytes = sum(t.numel() * t.element_size() for t in outs)
        return self._collective("all_gather", input_tensors + outs, input_tensors[0], nbytes, run, "",
                                input_tensors[0].numel(), sum(t.numel() for t in outs), result=output_tensors)

    def _allgather_base(self, output, input, opts=None):
        di, do = _Dense([input]), _Dense([output])

        def run():
            chunks = list(do.dense[0].reshape(self.size(), -1).unbind(0))
            self._gloo.allgather([chunks], [di.dense[0].reshape(-1)]).wait()
            do.finish()
        return self._collective("all_gather", [input, output], input, output.numel() * output.element_size(), run,
                                "", input.numel(), output.numel(), result=[output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced("all_gather", outputs, inputs, self._allgather_base)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        works = [self.allgather([outs], [inp]) for outs, inp in zip(output_lists, input_list)]
        return works[-1]

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        ins = [t for lst in input_tensors for t in lst]
        d_out, d_in = _Dense(output_tensors), _Dense(ins)
        red = sig.redop_name(opts.reduceOp)

        def run():
            # through an all_reduce of the concatenated input: gloo's reduce_scatter takes only some dtypes
            flat = torch.cat([t.reshape(-1) for t in d_in.dense])
            self._gloo_allreduce(flat, opts.reduceOp)
            n = d_out.dense[0].numel()
            r = self.rank()
            d_out.dense[0].copy_(flat[r * n:(r + 1) * n].view_as(d_out.dense[0]))
            d_out.finish()
        nbytes = sum(t.numel() * t.element_size() for t in ins)
        return self._collective("reduce_scatter", output_tensors + ins, output_tensors[0], nbytes, run, red,
                                sum(t.numel() for t in ins), output_tensors[0].numel(), result=output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        chunks = list(input.reshape(self.size(), -1).unbind(0))
        out_flat = output.reshape(-1) if output.is_contiguous() else output
        work = self.reduce_scatter([out_flat], [chunks], opts)
        work._result = [output]
        return work

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced("reduce_scatter", outputs, inputs,
                               lambda o, i, _o=None: self._reduce_scatter_base(o, i, opts))

    def _coalesced(self, kind, outputs, inputs, one):
        """A coalesced call: one collective per tensor pair, in order, on the collective queue; the
        returned work (the last one's) ends after all of them."""
        work = None
        for o, i in zip(outputs, inputs):
            work = one(o, i)
        return work

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        d = _Dense(tensors)

        def run():
            o = dist.BroadcastOptions()
            o.rootRank, o.rootTensor = opts.rootRank, opts.rootTensor
            self._gloo.broadcast(d.dense, o).wait()
            d.finish()
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        return self._collective("broadcast", tensors, tensors[0], nbytes, run, "", tensors[0].numel(),
                                tensors[0].numel())

    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceOptions()
        d = _Dense(tensors)
        red = sig.redop_name(opts.reduceOp)

        def run():
            o = dist.ReduceOptions()
            o.reduceOp, o.rootRank, o.rootTensor = opts.reduceOp, opts.rootRank, opts.rootTensor
            self._gloo.reduce(d.dense, o).wait()
            d.finish()
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        return self._collective("reduce", tensors, tensors[0], nbytes, run, red, tensors[0].numel(),
                                tensors[0].numel())

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        output_split_sizes = list(output_split_sizes or [output.shape[0] // self.size()] * self.size())
        input_split_sizes = list(input_split_sizes or [input.shape[0] // self.size()] * self.size())
        do, di = _Dense([output]), _Dense([input])

        def run():
            self._gloo.alltoall_base(do.dense[0], di.dense[0], list(output_split_sizes), list(input_split_sizes),
                                     dist.AllToAllOptions()).wait()
            do.finish()
        # uneven splits differ across ranks by design: only the op and dtype must agree
        return self._collective("all_to_all", [input, output], input, input.numel() * input.element_size(), run,
                                "", input.numel(), output.numel(), check_fields=(1, 2, 3), result=[output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        do, di = _Dense(output_tensors), _Dense(input_tensors)

        def run():
            flat_in = torch.cat([t.reshape(-1) for t in di.dense])
            flat_out = torch.empty(sum(t.numel() for t in do.dense), dtype=flat_in.dtype)
            self._gloo.alltoall_base(flat_out, flat_in, [t.numel() for t in do.dense],
                                     [t.numel() for t in di.dense], dist.AllToAllOptions()).wait()
            off = 0
            for t in do.dense:
                t.copy_(flat_out[off:off + t.numel()].view_as(t))
                off += t.numel()
            do.finish()
        nbytes = sum(t.numel() * t.element_size() for t in input_tensors)
        return self._collective("all_to_all", input_tensors + output_tensors, input_tensors[0], nbytes, run, "",
                                sum(t.numel() for t in input_tensors), sum(t.numel() for t in output_tensors),
                                check_fields=(1, 2, 3), result=output_tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.GatherOptions()
        outs = [t for lst in output_tensors for t in lst]
        di, do = _Dense(input_tensors), _Dense(outs)
        it = iter(do.dense)
        nested = [[next(it) for _ in lst] for lst in output_tensors]

        def run():
            o = dist.GatherOptions()
            o.rootRank = opts.rootRank
            self._gloo.gather(nested, di.dense, o).wait()
            do.finish()
        nbytes = input_tensors[0].numel() * input_tensors[0].element_size() * self.size()
        return self._collective("gather", input_tensors + outs, input_tensors[0], nbytes, run, "",
                                input_tensors[0].numel(), sum(t.numel() for t in outs), result=output_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.ScatterOptions()
        ins = [t for lst in input_tensors for t in lst]
        do, di = _Dense(output_tensors), _Dense(ins)
        it = iter(di.dense)
        nested = [[next(it) for _ in lst] for lst in input_tensors]

        def run():
            o = dist.ScatterOptions()
            o.rootRank = opts.rootRank
            self._gloo.scatter(do.dense, nested, o).wait()
            do.finish()
        nbytes = output_tensors[0].numel() * output_tensors[0].element_size() * self.size()
        return self._collective("scatter", output_tensors + ins, output_tensors[0], nbytes, run, "",
                                output_tensors[0].numel(), output_tensors[0].numel(), result=output_tensors)

    # torch 2.13's names for the tensor forms (older torch calls the underscore names above)
    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def _start_coalescing(self, device) -> None:
        self._coalescing = True

    def _end_coalescing(self, device):
        """The work of a coalescing block: it ends when the collective queue's last collective does."""
        from .. import runtime

        self._coalescing = False
        core = runtime.core(device.index or 0) if getattr(device, "type", "") == BACKEND else None
        return NeuronWork(self, core, core.cc_free_ns if core is not None else 0, [])

    def barrier(self, opts=None):
        return self._collective("barrier", [], None, 0, lambda: None)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return self.barrier()

    # --- point to point -----------------------------------------------------------------------
    def send(self, tensors, dst: int, tag: int = 0):
        return self._p2p("send", tensors, dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        return self._p2p("recv", tensors, src, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        raise DistributedError("recv from any source is not supported by the neuron process group (nor by "
                               "TorchNeuron's collectives runtime for device tensors): pass src=")

    def _p2p(self, kind, tensors, peer: int, tag: int):
        """send/recv: the two ranks exchange arrival times (the sender's first, then the receiver's), so
        both compute the same start; then gloo moves the data."""
        from .. import runtime
        from ..runtime.hostcost import host_costs

        with self._lock:
            core = self._core_of(tensors)
            clock = runtime.CLOCK
            host_start = clock.now()
            submit = clock.advance(host_costs().collective_submit_ns)
            arrival = self._arrival(core, submit)
            t = tensors[0]
            seq = next(self._p2p_seq)
            d = _Dense(tensors)
            ranks = self.ranks()
            with clock.emulation():
                mine = torch.tensor(sig.encode(arrival, 0, "send", t, ""), dtype=torch.int64)
                theirs = torch.empty_like(mine)
                # tags of trnscope's own messages stay clear of the user's
                ttag = (1 << 24) + tag

                def exchange():
                    if kind == "send":
                        self._gloo.send([mine], peer, ttag).wait()
                        self._gloo.recv([theirs], peer, ttag).wait()
                    else:
                        self._gloo.recv([theirs], peer, ttag).wait()
                        self._gloo.send([mine], peer, ttag).wait()
                self._gloo_run(exchange, kind, seq)
                other = theirs.tolist()
                sig.check([mine.tolist(), other] if kind == "send" else [other, mine.tolist()],
                          [ranks[self.rank()], ranks[peer]] if kind == "send" else [ranks[peer], ranks[self.rank()]],
                          self.name, fields=(3, 5, 6))
                start = max(arrival, int(other[0]))
                nbytes = t.numel() * t.element_size()
                dur, algo, _ = self._state.duration(kind, nbytes, [ranks[self.rank()], ranks[peer]])
                end = start + dur
                core.cc_free_ns = max(core.cc_free_ns, end)

                def data():
                    if kind == "send":
                        self._gloo.send(d.dense, peer, tag).wait()
                    else:
                        self._gloo.recv(d.dense, peer, tag).wait()
                        d.finish()
                self._gloo_run(data, kind, seq)
            if core.observed:
                RECORDS.append(CollectiveRecord(
                    seq=seq, kind=kind, profiling_name=f"nccl:{kind} {ranks[self.rank()]}->{ranks[peer]}" if kind == "send"
                    else f"nccl:{kind} {ranks[peer]}->{ranks[self.rank()]}", pg_name=self.name,
                    pg_desc=getattr(self, "group_desc", "") or "", group_ranks=[ranks[self.rank()], ranks[peer]],
                    rank=ranks[self.rank()], device=core.index, dtype=sig.dtype_name(t.dtype), in_nelems=t.numel(),
                    out_nelems=t.numel(), nbytes=nbytes, algorithm=algo, reduce_op="", host_start_ns=host_start,
                    host_end_ns=clock.now(), arrival_ns=arrival, device_start_ns=start, device_end_ns=end,
                    arrivals_ns=[arrival, int(other[0])], peer=ranks[peer], thread=threading.get_native_id()))
            self._wait_after_backward()
            return NeuronWork(self, core, end, tensors)


def _premul_factor(op):
    f = op.factor if hasattr(op, "factor") else None
    if f is None:
        raise DistributedError("a PREMUL_SUM reduce op without a factor")
    return f.item() if isinstance(f, torch.Tensor) else float(f)


def _flat_fingerprint(tensors) -> torch.Tensor:
    """A stand-in with the group's dtype and total element count (a coalesced call's fingerprint)."""
    return torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device="meta")


def create_neuron_process_group(opts, backend_options=None) -> ProcessGroupNeuron:
    """The backend factory (torch's extended API: the options carry the group's global ranks)."""
    from . import fsdp

    fsdp.install()
    return ProcessGroupNeuron(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                              list(opts.global_ranks_in_group or []))
