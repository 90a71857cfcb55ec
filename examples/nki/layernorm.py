"""LayerNorm over the last dim, y = (x - mean) / sqrt(var + eps) * gamma + beta.

Statistics come from VectorE's bn_stats (per 512-element chunk) and bn_aggr, as in Neuron's LayerNorm
tutorial; the normalisation x * rstd - mean * rstd is one ScalarE activation (scale and bias per
partition), leaving VectorE the statistics and the gamma multiply and beta add; gamma and beta are
loaded once, broadcast to all partitions by the DMA.

    trnscope run examples/nki/layernorm.py
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    rows, d = x.shape
    P = nl.tile_size.pmax
    fmax = nl.tile_size.bn_stats_fmax
    chunks = (d + fmax - 1) // fmax
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.ndarray((P, d), dtype=gamma.dtype, buffer=nl.sbuf)
    b = nl.ndarray((P, d), dtype=beta.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.reshape((1, d)).broadcast(0, P))
    nisa.dma_copy(dst=b, src=beta.reshape((1, d)).broadcast(0, P))
    for r0 in range(0, rows, P):
        p = min(P, rows - r0)
        xt = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[r0:r0 + p, :])
        stats = nl.ndarray((p, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in range(chunks):
            c0 = c * fmax
            nisa.bn_stats(dst=stats[:, 6 * c:6 * c + 6], data=xt[:, c0:min(d, c0 + fmax)])
        mv = nl.ndarray((p, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)
        rstd = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=mv[:, 1:2], op0=nl.add, operand0=eps, op1=nl.power, operand1=-0.5)
        shift = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)  # -mean * rstd
        nisa.tensor_scalar(dst=shift, data=mv[:, 0:1], op0=nl.multiply, operand0=rstd, op1=nl.multiply,
                           operand1=-1.0)
        # (x - mean) * rstd = x * rstd + shift on ScalarE, so VectorE is left with gamma and beta
        y = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.copy, data=xt, scale=rstd, bias=shift)
        yg = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=yg, data1=y, data2=g[0:p, :], op=nl.multiply)
        yb = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=yb, data1=yg, data2=b[0:p, :], op=nl.add)
        nisa.dma_copy(dst=out[r0:r0 + p, :], src=yb)
    return out


if __name__ == "__main__":
    import numpy as np

    x = np.random.randn(300, 1000).astype(np.float32)
    g = np.random.randn(1000).astype(np.float32)
    b = np.random.randn(1000).astype(np.float32)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b
    print("max |err| vs NumPy:", float(np.abs(layernorm(x, g, b) - ref).max()))
    print(layernorm.last_run.describe())
