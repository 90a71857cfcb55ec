"""Tiled element-wise addition: 128 x 512 tiles, two loads, one VectorE add, one store per tile.

    trnscope run examples/nki/tensor_add.py
"""

import nki
import nki.isa as nisa
import nki.language as nl

TILE_F = 512


@nki.jit
def tensor_add(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, "a and b must have the same shape and dtype"
    rows, cols = a.shape
    P = nl.tile_size.pmax
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for r0 in range(0, rows, P):
        p = min(P, rows - r0)
        for c0 in range(0, cols, TILE_F):
            f = min(TILE_F, cols - c0)
            ta = nl.ndarray((p, f), dtype=a.dtype, buffer=nl.sbuf)
            tb = nl.ndarray((p, f), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=ta, src=a[r0:r0 + p, c0:c0 + f])
            nisa.dma_copy(dst=tb, src=b[r0:r0 + p, c0:c0 + f])
            tc = nl.ndarray((p, f), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=tc, data1=ta, data2=tb, op=nl.add)
            nisa.dma_copy(dst=out[r0:r0 + p, c0:c0 + f], src=tc)
    return out


if __name__ == "__main__":
    import numpy as np

    a = np.random.rand(1000, 2000).astype(np.float32)
    b = np.random.rand(1000, 2000).astype(np.float32)
    c = tensor_add(a, b)
    print("max |err| vs NumPy:", float(np.abs(c - (a + b)).max()))
    print(tensor_add.last_run.describe())
