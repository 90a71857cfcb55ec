"""Range arg-max over a fixed array, answered for many ranges at once.

An iterative segment tree (2n slots; leaves at n..2n-1, node i covers its children 2i and 2i+1)
built with one numpy pass per tree level. A query walks both ends of every range up the tree
together, so a batch of q ranges costs O(q log n) numpy work in about log2(n) vector steps. Ties go
to the lower index, so the earliest of several equally long slices is the one shown.
"""

from __future__ import annotations

import numpy as np


class RangeArgMax:
    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values)
        n = len(self.values)
        self.size = n
        tree = np.zeros(2 * max(n, 1), dtype=np.int64)
        tree[n : 2 * n] = np.arange(n, dtype=np.int64)
        # Node i depends only on nodes 2i and 2i+1, which are larger; doing the index blocks
        # [2^k, 2^(k+1)) from the highest k down therefore never reads an unfinished node.
        k = max(n - 1, 1).bit_length()
        while k >= 0:
            lo, hi = 1 << k, min(1 << (k + 1), n)
            if lo < hi:
                nodes = np.arange(lo, hi, dtype=np.int64)
                tree[nodes] = self._better(tree[2 * nodes], tree[2 * nodes + 1])
            k -= 1
        self.tree = tree

    def _better(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        va, vb = self.values[a], self.values[b]
        return np.where((va > vb) | ((va == vb) & (a < b)), a, b)

    def query(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Index of the maximum in each non-empty range [lo, hi)."""
        lo = np.asarray(lo, dtype=np.int64) + self.size
        hi = np.asarray(hi, dtype=np.int64) + self.size
        if np.any(lo >= hi):
            raise ValueError("RangeArgMax.query needs non-empty ranges")
        best = np.full(len(lo), -1, dtype=np.int64)
        active = np.arange(len(lo))
        while len(active):
            left, right = lo[active], hi[active]
            take_left = (left & 1) == 1
            if take_left.any():
                idx = active[take_left]
                best[idx] = self._merge(best[idx], self.tree[left[take_left]])
                left = left + take_left
            take_right = (right & 1) == 1
            if take_right.any():
                idx = active[take_right]
                best[idx] = self._merge(best[idx], self.tree[right[take_right] - 1])
                right = right - take_right
            lo[active], hi[active] = left >> 1, right >> 1
            active = active[(left >> 1) < (right >> 1)]
        return best

    def _merge(self, current: np.ndarray, candidate: np.ndarray) -> np.ndarray:
        unset = current < 0
        safe = np.where(unset, candidate, current)
        return np.where(unset, candidate, self._better(safe, candidate))
