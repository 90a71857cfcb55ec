"""A valid sequential order of a Program's instructions: what the interpreter executes.

Streams run in program order; an instruction may go once its semaphore waits hold. Signals are
applied when the instruction completes. Walking the streams this way also proves the program
cannot deadlock: if no stream head can go while instructions remain, the waits form a cycle or
wait for increments nobody makes.
"""

from __future__ import annotations

from .errors import DeadlockError
from .instructions import SemaphoreSet
from .program import Program


def execution_order(program: Program) -> list[int]:
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
