"""A valid sequential order of a Program's instructions: what the interpreter executes.

Streams run in program order; an instruction may go once its semaphore waits hold. Signals are
applied when the instruction completes. Walking the streams this way also proves the program
cannot deadlock: if no stream head can go while instructions remain, the waits form a cycle or
wait for increments nobody makes.

The walk runs compiled over the Program's columns (``isa.columns``); ``_execution_order_reference``
is the same walk in plain Python, kept as the specification the tests hold the fast one to.
"""

from __future__ import annotations

import numpy as np

from .columns import Columns, program_columns, stream_csr
from .errors import DeadlockError, ProgramError
from .instructions import SemaphoreSet
from .program import Program


def execution_order(program: Program, *, columns: Columns | None = None) -> list[int]:
    cols = columns if columns is not None else program_columns(program)
    check_semaphore_ids(program, cols)
    from ._order_core import greedy_order  # numba loads only when a program is ordered

    _, ptr, instr = stream_csr(cols)
    order, done, heads, sem = greedy_order(ptr, instr, cols.wait_ptr, cols.wait_sem, cols.wait_val, cols.sig_ptr,
                                           cols.sig_sem, cols.sig_val, cols.sig_set, len(program.semaphores))
    if done < cols.n:
        streams = [instr[ptr[s]:ptr[s + 1]].tolist() for s in range(len(ptr) - 1)]
        rel = (heads - ptr[:-1]).tolist()
        raise DeadlockError(_blocked_message(program, streams, rel, sem.tolist()))
    return order.tolist()


def check_semaphore_ids(program: Program, cols: Columns) -> None:
    """Every semaphore an instruction waits on, signals or sets must be declared."""
    nsem = len(program.semaphores)
    bad: list[int] = []
    for ptr, ids in ((cols.wait_ptr, cols.wait_sem), (cols.sig_ptr, cols.sig_sem)):
        hit = np.flatnonzero((ids < 0) | (ids >= nsem))
        if len(hit):
            bad.append(int(np.searchsorted(ptr, hit[0], side="right")) - 1)
    if bad:
        i = min(bad)
        ins = program.instructions[i]
        used = [s for s, _ in (*ins.waits, *ins.signals)] + ([ins.sem] if isinstance(ins, SemaphoreSet) else [])
        sid = next(s for s in used if not 0 <= s < nsem)
        raise ProgramError(f"{program.label(i)}: semaphore {sid} is not declared (program has {nsem})")


def _execution_order_reference(program: Program) -> list[int]:
    streams = list(program.streams().values())
    heads = [0] * len(streams)
    sem = [0] * len(program.semaphores)
    order: list[int] = []
    remaining = len(program.instructions)
    instrs = program.instructions
    while remaining:
        progressed = False
        for s, idxs in enumerate(streams):
            h = heads[s]
            while h < len(idxs):
                ins = instrs[idxs[h]]
                if any(sem[sid] < val for sid, val in ins.waits):
                    break
                order.append(idxs[h])
                for sid, delta in ins.signals:
                    sem[sid] += delta
                if isinstance(ins, SemaphoreSet):
                    sem[ins.sem] = ins.value
                h += 1
                remaining -= 1
                progressed = True
            heads[s] = h
        if not progressed:
            raise DeadlockError(_blocked_message(program, streams, heads, sem))
    return order


def _blocked_message(program: Program, streams, heads, sem) -> str:
    lines = []
    for s, idxs in enumerate(streams):
        if heads[s] < len(idxs):
            i = idxs[heads[s]]
            unmet = [f"{program.semaphores[sid]} >= {val} (is {sem[sid]})"
                     for sid, val in program.instructions[i].waits if sem[sid] < val]
            lines.append(f"  {program.label(i)} waits for {', '.join(unmet)}")
    return ("the program deadlocks: no engine or DMA queue can make progress\n" + "\n".join(lines)
            + "\nfix the semaphore waits/signals so every wait is reached by earlier signals")
