"""The event-driven core: engines run their streams in order, semaphores order them against each other.

Time advances from one completion to the next. At each event time every stream head whose engine
is free and whose semaphore waits hold starts. TensorE has two resources: LoadStationary may load
the next weights while the previous MultiplyMoving streams (background LS, S1), and a
MultiplyMoving needs the array loaded by the LoadStationary before it. A DMA queue triggers its
transfers in order as soon as their waits hold; each transfer's descriptors spread round-robin
over the 16 DMA engines, which serve them FIFO after the fixed issue latency. A Program spread over
the physical cores of a logical core (LNC=2) has streams per physical core (``pcore``): each core
has its own TensorE state and its own 16 DMA engines. VectorE and ScalarE instructions that touch
PSUM hold PSUM locks while they run (``psum_lock``, a bit per lock: all of PSUM on NC-v2, its bank
on NC-v3), so the two engines' PSUM accesses serialise as the compiler orders them (S1, S2): an
instruction whose lock another engine holds starts when it is released and, like any instruction
held back by another engine, pays the dependent-instruction overhead. Compiled with numba
so large programs simulate at millions of instructions per second.
"""

from __future__ import annotations

import numpy as np
from numba import njit

KIND_COMPUTE, KIND_LS, KIND_MM, KIND_DMA, KIND_PE = 0, 1, 2, 3, 4


@njit(cache=True)
def _heap_push(ht, hi, size, t, i):
    k = size
    ht[k] = t
    hi[k] = i
    while k > 0:
        p = (k - 1) >> 1
        if ht[p] < ht[k] or (ht[p] == ht[k] and hi[p] <= hi[k]):
            break
        ht[p], ht[k] = ht[k], ht[p]
        hi[p], hi[k] = hi[k], hi[p]
        k = p
    return size + 1


@njit(cache=True)
def _heap_pop(ht, hi, size):
    t = ht[0]
    i = hi[0]
    size -= 1
    ht[0] = ht[size]
    hi[0] = hi[size]
    k = 0
    while True:
        left = 2 * k + 1
        if left >= size:
            break
        c = left
        right = left + 1
        if right < size and (ht[right] < ht[left] or (ht[right] == ht[left] and hi[right] < hi[left])):
            c = right
        if ht[k] < ht[c] or (ht[k] == ht[c] and hi[k] <= hi[c]):
            break
        ht[k], ht[c] = ht[c], ht[k]
        hi[k], hi[c] = hi[c], hi[k]
        k = c
    return t, i, size


@njit(cache=True)
def run_core(n, kind, base_ns, dep_ns, wait_ptr, wait_sem, wait_val, sig_ptr, sig_sem, sig_val, sig_set,
             dma_desc, dma_desc_ns, dma_fixed_ns, stream_ptr, stream_instr, n_streams, n_sems, n_dma_engines,
             throttle, throttle_idle_ns, throttle_ramp_ns, throttle_start, pcore, n_cores, psum_lock, n_locks):
    start = np.full(n, -1.0)
    end = np.full(n, -1.0)
    data_start = np.full(n, -1.0)
    wait_ns = np.zeros(n)
    heads = stream_ptr[:-1].copy()
    free = np.zeros(n_streams)          # when each stream may start its next instruction
    sem = np.zeros(n_sems, np.int64)
    sem_time = np.zeros(n_sems)
    # per physical core: its DMA engines, round-robin position and TensorE state
    eng_free = np.zeros(n_cores * n_dma_engines)
    rr = np.zeros(n_cores, np.int64)
    ls_free = np.zeros(n_cores)
    mm_free = np.zeros(n_cores)
    ls_end = np.zeros(n_cores)
    pe_last_end = np.full(n_cores, -1e30)
    pe_busy_since = np.zeros(n_cores)
    lock_free = np.zeros(n_cores * max(n_locks, 1))   # when each PSUM lock of each core is released
    ht = np.empty(n + 1)
    hi = np.empty(n + 1, np.int64)
    hsize = 0
    done = 0
    now = 0.0
    while True:
        # start everything that can start at `now`
        for s in range(n_streams):
            while heads[s] < stream_ptr[s + 1]:
                i = stream_instr[heads[s]]
                k = kind[i]
                c = pcore[i]
                if k == KIND_LS:
                    gate = ls_free[c]
                elif k == KIND_MM:
                    gate = max(mm_free[c], ls_end[c])
                elif k == KIND_PE:
                    gate = max(mm_free[c], ls_free[c])
                elif k == KIND_DMA:
                    gate = 0.0
                else:
                    gate = free[s]
                engine_gate = gate
                locked = 0.0
                lm = psum_lock[i]
                if lm != 0:
                    for b in range(n_locks):
                        if (lm >> b) & 1 and lock_free[c * n_locks + b] > locked:
                            locked = lock_free[c * n_locks + b]
                    if locked > gate:
                        gate = locked
                    else:
                        locked = 0.0
                if gate > now:
                    break
                ok = True
                last_sig = -1.0
                for w in range(wait_ptr[i], wait_ptr[i + 1]):
                    if sem[wait_sem[w]] < wait_val[w]:
                        ok = False
                        break
                    if sem_time[wait_sem[w]] > last_sig:
                        last_sig = sem_time[wait_sem[w]]
                if not ok:
                    break
                heads[s] += 1
                start[i] = now
                # held back by a semaphore, or by a PSUM lock the other engine released
                waited = (wait_ptr[i + 1] > wait_ptr[i] and last_sig >= gate) or locked > 0.0
                if waited:
                    wait_ns[i] = now - engine_gate
                if k == KIND_DMA:
                    ready = now + dma_fixed_ns[i]
                    nd = dma_desc[i]
                    per = nd // n_dma_engines
                    extra = nd % n_dma_engines
                    fin = ready
                    first = 1e300
                    base = c * n_dma_engines
                    for j in range(n_dma_engines):
                        e = base + (rr[c] + j) % n_dma_engines
                        cnt = per + (1 if j < extra else 0)
                        if cnt == 0:
                            continue
                        st = max(ready, eng_free[e])
                        en = st + cnt * dma_desc_ns[i]
                        eng_free[e] = en
                        if st < first:
                            first = st
                        if en > fin:
                            fin = en
                    rr[c] = (rr[c] + max(extra, 1)) % n_dma_engines
                    data_start[i] = first if first < 1e300 else ready
                    # a queue completes its transfers in FIFO order, so its semaphore counts them in order
                    fin = max(fin, free[s])
                    free[s] = fin
                    end[i] = fin
                else:
                    dur = base_ns[i] + (dep_ns[i] if waited else 0.0)
                    if k == KIND_MM or k == KIND_PE:
                        if throttle:
                            if now - pe_last_end[c] > throttle_idle_ns:
                                pe_busy_since[c] = now
                            frac = min(1.0, (now - pe_busy_since[c]) / throttle_ramp_ns)
                            dur = dur / (throttle_start + (1.0 - throttle_start) * frac)
                        mm_free[c] = now + dur
                        pe_last_end[c] = now + dur
                        if k == KIND_PE:
                            ls_free[c] = now + dur
                    elif k == KIND_LS:
                        ls_free[c] = now + dur
                        ls_end[c] = now + dur
                    else:
                        free[s] = now + dur
                        if lm != 0:
                            for b in range(n_locks):
                                if (lm >> b) & 1:
                                    lock_free[c * n_locks + b] = now + dur
                    end[i] = now + dur
                hsize = _heap_push(ht, hi, hsize, end[i], i)
        if hsize == 0:
            break
        # advance to the next completion and apply every signal due at that time
        now, i, hsize = _heap_pop(ht, hi, hsize)
        while True:
            for g in range(sig_ptr[i], sig_ptr[i + 1]):
                if sig_set[g]:
                    sem[sig_sem[g]] = sig_val[g]
                else:
                    sem[sig_sem[g]] += sig_val[g]
                sem_time[sig_sem[g]] = now
            done += 1
            if hsize == 0 or ht[0] > now:
                break
            _, i, hsize = _heap_pop(ht, hi, hsize)
    return start, end, data_start, wait_ns, heads, done
