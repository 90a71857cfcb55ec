"""RMSNorm, y = x / sqrt(mean(x^2) + eps) * w, one pass over x per 128-row tile.

ScalarE squares x / sqrt(D) and add-reduces the row in the same instruction (the mean of squares);
one VectorE tensor_scalar turns it into (ms + eps) ** -0.5; the row is scaled by that per-partition
value (on ScalarE for fp32, on VectorE for 16-bit types: the kernel specialises on the dtype at
trace time) and multiplied by w, which is loaded once, broadcast to all 128 partitions by the DMA.

    trnscope run examples/nki/rmsnorm.py
"""

import math

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def rmsnorm(x, w, eps=1e-6):
    rows, d = x.shape
    assert w.shape == (d,), f"w must have shape ({d},)"
    P = nl.tile_size.pmax
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    w_tile = nl.ndarray((P, d), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_tile, src=w.reshape((1, d)).broadcast(0, P))  # one row to every partition
    for r0 in range(0, rows, P):
        p = min(P, rows - r0)
        xt = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[r0:r0 + p, :])
        sq = nl.ndarray((p, d), dtype=nl.float32, buffer=nl.sbuf)
        ms = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=xt, scale=1.0 / math.sqrt(d), reduce_op=nl.add, reduce_res=ms,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        rstd = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=ms, op0=nl.add, operand0=eps, op1=nl.power, operand1=-0.5)
        y = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        if x.dtype == nl.float32:  # ScalarE takes the scaling, leaving VectorE only the weight multiply
            nisa.activation(dst=y, op=nl.copy, data=xt, scale=rstd)
        else:  # 16-bit tiles: VectorE's fast modes make the scaling nearly free there (trn2)
            nisa.tensor_scalar(dst=y, data=xt, op0=nl.multiply, operand0=rstd)
        yw = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=yw, data1=y, data2=w_tile[0:p, :], op=nl.multiply)
        nisa.dma_copy(dst=out[r0:r0 + p, :], src=yw)
    return out


if __name__ == "__main__":
    import numpy as np

    x = np.random.randn(1000, 4096).astype(np.float32)
    w = np.random.randn(4096).astype(np.float32)
    ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    print("max |err| vs NumPy:", float(np.abs(rmsnorm(x, w) - ref).max()))
    print(rmsnorm.last_run.describe())
