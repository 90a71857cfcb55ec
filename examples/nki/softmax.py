"""Row softmax: VectorE finds the (negated) row max, ScalarE computes exp(x - max) and its row sum in one
instruction, VectorE takes the reciprocal of the sum and scales the row by it.

    trnscope run examples/nki/softmax.py
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def softmax(x):
    rows, d = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for r0 in range(0, rows, P):
        p = min(P, rows - r0)
        xt = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[r0:r0 + p, :])
        neg_max = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=xt, axis=1, negate=True)
        e = nl.ndarray((p, d), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=xt, bias=neg_max, reduce_op=nl.add, reduce_res=total,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=total)
        y = nl.ndarray((p, d), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[r0:r0 + p, :], src=y)
    return out


if __name__ == "__main__":
    import numpy as np

    x = np.random.randn(512, 2048).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    print("max |err| vs NumPy:", float(np.abs(softmax(x) - e / e.sum(-1, keepdims=True)).max()))
    print(softmax.last_run.describe())
