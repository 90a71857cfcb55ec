"""Flash-style attention forward for one head: softmax(q k^T * scale [+ causal mask]) v, never holding the
[S, S] scores. q and k arrive transposed ([d, S], d <= 128 on the partitions), v as [S, d].

K^T and V are loaded into SBUF once. Per 128-query tile, keys go in blocks of 512: TensorE computes the
scores into one PSUM bank,
ScalarE scales them, GpSimd masks the diagonal block (causal), VectorE keeps the running row max,
ScalarE takes exp(s - max) with its row sum, TensorE transposes the probabilities 128 keys at a time and
multiplies them with v into PSUM; the running output and sum are rescaled by exp(old max - new max).

    trnscope run examples/nki/attention.py
"""

import nki
import nki.isa as nisa
import nki.language as nl

KEY_BLOCK = 512
NEG = -30000.0  # a masked score: exp(NEG - max) is 0 in fp32 and bf16


@nki.jit
def attention_fwd(q_t, k_t, v, scale=1.0, causal=False):
    d, s_q = q_t.shape
    d2, s_k = k_t.shape
    assert d == d2 and v.shape == (s_k, d), "q_t [d, Sq], k_t [d, Sk], v [Sk, d]"
    P = nl.tile_size.pmax
    assert d <= P and s_q % P == 0 and s_k % KEY_BLOCK == 0, "d <= 128, Sq % 128 == 0, Sk % 512 == 0"
    out = nl.ndarray((s_q, d), dtype=v.dtype, buffer=nl.shared_hbm)
    # K^T and V stay in SBUF for all query tiles (one DMA each): [d, Sk] and [128 keys, Sk / 128, d]
    k_all = nl.ndarray((d, s_k), dtype=k_t.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_all, src=k_t)
    v_all = nl.ndarray((P, s_k // P, d), dtype=v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=v_all, src=v.reshape((s_k // P, P, d)).permute((1, 0, 2)))
    for qi in range(s_q // P):
        q0 = qi * P
        qt = nl.ndarray((d, P), dtype=q_t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=qt, src=q_t[:, q0:q0 + P])
        m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=m, value=NEG)
        l_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=l_sum, value=0.0)
        o = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=o, value=0.0)
        last = (q0 + P - 1) // KEY_BLOCK + 1 if causal else s_k // KEY_BLOCK
        for kj in range(last):
            k0 = kj * KEY_BLOCK
            s_ps = nl.ndarray((P, KEY_BLOCK), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=s_ps, stationary=qt, moving=k_all[:, k0:k0 + KEY_BLOCK])
            s = nl.ndarray((P, KEY_BLOCK), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=s, op=nl.copy, data=s_ps, scale=scale)
            if causal and k0 + KEY_BLOCK > q0:  # keep key k0+f for query q0+p when (q0 + p) - (k0 + f) >= 0
                nisa.affine_select(dst=s, pattern=[[-1, KEY_BLOCK]], channel_multiplier=1, on_true_tile=s,
                                   on_false_value=NEG, cmp_op=nl.greater_equal, offset=q0 - k0)
            mx = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=mx, op=nl.maximum, data=s, axis=1)
            m_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=m_new, data1=m, data2=mx, op=nl.maximum)
            neg_m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=neg_m, data=m_new, op0=nl.multiply, operand0=-1.0)
            corr = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=corr, op=nl.exp, data=m, bias=neg_m)
            p = nl.ndarray((P, KEY_BLOCK), dtype=v.dtype, buffer=nl.sbuf)
            row = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=p, op=nl.exp, data=s, bias=neg_m, reduce_op=nl.add, reduce_res=row,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
            nisa.tensor_scalar(dst=l_sum, data=l_sum, op0=nl.multiply, operand0=corr, op1=nl.add, operand1=row)
            pv = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
            for c in range(KEY_BLOCK // P):
                pt_ps = nl.ndarray((P, P), dtype=v.dtype, buffer=nl.psum)
                nisa.nc_transpose(dst=pt_ps, data=p[:, c * P:(c + 1) * P])
                pt = nl.ndarray((P, P), dtype=v.dtype, buffer=nl.sbuf)
                if c % 2:  # PSUM evacuation alternates between ScalarE and VectorE, which are both busy here
                    nisa.activation(dst=pt, op=nl.copy, data=pt_ps)
                else:
                    nisa.tensor_copy(dst=pt, src=pt_ps)
                nisa.nc_matmul(dst=pv, stationary=pt, moving=v_all[:, k0 // P + c, :], accumulate=c > 0)
            o_new = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=o_new, data=o, op0=nl.multiply, operand0=corr)
            o = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=o, data1=o_new, data2=pv, op=nl.add)
            m = m_new
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=l_sum)
        y = nl.ndarray((P, d), dtype=v.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=o, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[q0:q0 + P, :], src=y)
    return out


if __name__ == "__main__":
    import numpy as np

    rng = np.random.default_rng(0)
    S, D = 1024, 64
    q, k, v = (rng.standard_normal((S, D), dtype=np.float32) for _ in range(3))
    sc = q @ k.T / np.sqrt(D)
    sc = np.where(np.tril(np.ones((S, S), bool)), sc, -np.inf)
    e = np.exp(sc - sc.max(-1, keepdims=True))
    ref = (e / e.sum(-1, keepdims=True)) @ v
    got = attention_fwd(np.ascontiguousarray(q.T), np.ascontiguousarray(k.T), v, scale=1 / np.sqrt(D), causal=True)
    print("max |err| vs NumPy:", float(np.abs(got - ref).max()))
    print(attention_fwd.last_run.describe())
