"""The greedy stream walk of :func:`trnscope.isa.execution_order`, compiled (numba)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def greedy_order(stream_ptr, stream_instr, wait_ptr, wait_sem, wait_val, sig_ptr, sig_sem, sig_val, sig_set,
                 n_sems):
    """Sweep the streams in order, running each stream's head while its waits hold; signals apply at once.

    Returns (order, count, heads, sem): ``count < len(order)`` means no stream could make progress.
    """
    n = len(stream_instr)
    n_streams = len(stream_ptr) - 1
    heads = stream_ptr[:-1].copy()
    sem = np.zeros(max(1, n_sems), np.int64)
    order = np.empty(n, np.int64)
    k = 0
    while k < n:
        progressed = False
        for s in range(n_streams):
            h = heads[s]
            end = stream_ptr[s + 1]
            while h < end:
                i = stream_instr[h]
                blocked = False
                for w in range(wait_ptr[i], wait_ptr[i + 1]):
                    if sem[wait_sem[w]] < wait_val[w]:
                        blocked = True
                        break
                if blocked:
                    break
                order[k] = i
                k += 1
                for g in range(sig_ptr[i], sig_ptr[i + 1]):
                    if sig_set[g]:
                        sem[sig_sem[g]] = sig_val[g]
                    else:
                        sem[sig_sem[g]] += sig_val[g]
                h += 1
                progressed = True
            heads[s] = h
        if not progressed:
            break
    return order, k, heads, sem
