"""Compile an ATen-level FX graph (what AOTAutograd hands a backend) into ONE Program.

Element-wise ops and last-dim reductions that share a row space [R rows x H] fuse into one tile
loop: per 128-row tile the group's inputs are loaded once, every intermediate stays in SBUF, and
only values needed outside the group are stored. A fusion group picks instructions the way a
kernel writer would: full x row-vector products become tensor_scalar with a per-partition operand
(VectorE 4x mode in BF16), a square feeding a sum/mean becomes one ScalarE activation with
add-accumulation, constant scalings fold into the activation's scale. The ops that consume a
matmul's output run as its epilogue, on its tiles as they leave PSUM (epilogue.py). Every other op
reuses the eager kernel library, emitted into the same Program with HBM scratch tensors between
them. Views cost nothing: they are new access patterns over the same HBM bytes.
"""

from __future__ import annotations

import math
import re
import operator
from dataclasses import dataclass, field
from math import prod

import torch
import torch.fx as fx

from ..hw import HardwareSpec, get_spec
from ..isa import AP, Act, Activation, Alu, Program, TensorReduce, TensorScalar, TensorTensor, hbm
from ..sourceline import SourceLine, display_path, op_label
from .builder import KernelBuilder
from .lnc import MakeBuilder, spread
from .fxvalues import GraphCompileError
from .fxvalues import required_tensor as _tensor
from .fxvalues import tensor_of as _val
from .epilogue import GEMM_OPS, emit_matmul_with_epilogue, match_epilogue
from .kernels.elementwise import BINARY_ALU, UNARY_ACT
from .lowering import HbmInputs, LoweringContext, NoLowering, OpCall, _REGISTRY, _load_kernels, run_lowering
from .meta import TensorMeta
from .opcall import device_dtype, from_aten, meta_of, op_name

aten = torch.ops.aten
# Lowerings of custom ops that graphs link into their NEFF (NKI kernels: trnscope.nki.torch_ops), kept apart
# from the ATen registry of eager kernels: name -> lowering, called with the op's LoweringContext.
LINKED: dict = {}

VIEW_OPS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.expand.default, aten.t.default,
    aten.transpose.int, aten.permute.default, aten.slice.Tensor, aten.select.int, aten.alias.default,
    aten.detach.default, aten.as_strided.default,
}
# views with several results: each result is a window of the input's bytes
MULTI_VIEW_OPS = {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.chunk.default}
ROW_REDUCE = {aten.sum.dim_IntList: Alu.ADD, aten.mean.dim: Alu.ADD, aten.amax.default: Alu.MAX,
              aten.amin.default: Alu.MIN}
MAX_FUSED_H = 8192


@dataclass
class Value:
    """Where a graph value lives: an HBM tensor of the Program and its view metadata."""
    hbm: int
    meta: TensorMeta


@dataclass
class Group:
    rows: int
    h: int
    nodes: list[fx.Node] = field(default_factory=list)


@dataclass
class CompiledGraph:
    program: Program
    inputs: list[int]          # placeholder index -> HBM tensor (-1 if unused)
    outputs: list[int]         # output position -> HBM tensor
    kernels: int               # fusion groups + standalone kernels inside the one Program
    fused_ops: int             # ATen ops absorbed into fusion groups


def _row_space(t: torch.Tensor) -> tuple[int, int]:
    if t.dim() == 0:
        return 1, 1
    return prod(t.shape[:-1]), t.shape[-1]


class GraphCompiler:
    def __init__(self, gm: fx.GraphModule, spec: HardwareSpec | None = None, name: str = "graph",
                 epilogues: bool = True, make_builder: MakeBuilder = KernelBuilder):
        _load_kernels()
        self.epilogues = epilogues
        self.gm = gm
        self.spec = spec or get_spec()
        self.program = Program(name, target=self.spec.name)
        self.kb = make_builder(self.program, self.spec)
        self.values: dict[fx.Node | tuple[fx.Node, int], Value] = {}  # a multi-output op's values by (node, i)
        self.scalars: dict[fx.Node, float] = {}
        self.kernels = 0
        self.fused = 0
        self.graph_outputs: set[fx.Node] = set()  # the nodes the graph returns (set by compile)

    # --- entry --------------------------------------------------------------------------------------
    def compile(self) -> CompiledGraph:
        nodes = list(self.gm.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        inputs = []
        for i, n in enumerate(placeholders):
            v = _val(n)
            if v is None:
                inputs.append(-1)
                continue
            meta = meta_of(v)
            base = TensorMeta(meta.shape, meta.stride, meta.dtype, 0)
            idx = base.bind(self.program, f"in{i}", "input")
            self.values[n] = Value(idx, base)
            inputs.append(idx)
        output_node = next(n for n in nodes if n.op == "output")
        out_args = [a for a in _flatten(output_node.args[0])]
        self.graph_outputs = {a for a in out_args if isinstance(a, fx.Node)}
        self._users_outside: dict[fx.Node, int] = {}
        body = [n for n in nodes if n.op == "call_function"]
        plans = self._plan_epilogues(body)
        claimed = {x for plan in plans.values() for x in plan.nodes}
        for group in self._partition([n for n in body if n not in claimed]):
            if isinstance(group, Group):
                self._emit_group(group)
            elif group in plans:
                self._emit_epilogue(plans[group])
            else:
                self._emit_node(group)
        outputs = []
        for i, a in enumerate(out_args):
            if not isinstance(a, fx.Node) or a not in self.values:
                outputs.append(-1)
                continue
            outputs.append(self._as_output(a, i))
        self.program.meta.update({"kernels": self.kernels, "fused_ops": self.fused,
                                  "sbuf_peak_bytes": self.kb.sbuf_peak_bytes})
        return CompiledGraph(self.program, inputs, outputs, self.kernels, self.fused)

    # --- matmul epilogues ------------------------------------------------------------------------------
    def _plan_epilogues(self, body: list[fx.Node]) -> dict:
        """For each matmul (in graph order) the nodes its epilogue claims; a claimed node runs at its
        matmul's place, so a later matmul's epilogue may read it."""
        if not self.epilogues:
            return {}
        pos = {n: i for i, n in enumerate(body)}
        eff = dict(pos)
        claimed: set = set()
        plans = {}
        for n in body:
            if n.target not in GEMM_OPS or n in claimed:
                continue
            plan = match_epilogue(self, n, pos, eff, claimed)
            if plan is None:
                continue
            plans[n] = plan
            for x in plan.nodes:
                claimed.add(x)
                eff[x] = pos[n]
        return plans

    def _emit_epilogue(self, plan) -> None:
        emit_matmul_with_epilogue(self, plan)
        for x in plan.nodes:  # views of stored values, for the users outside
            if (x.target in VIEW_OPS or x.target in MULTI_VIEW_OPS) and x.args[0] in self.values:
                self._emit_node(x)

    # --- partitioning ---------------------------------------------------------------------------------
    def _fusable(self, n: fx.Node) -> tuple[int, int] | None:
        v = _val(n)
        if v is None or not v.dtype.is_floating_point or v.numel() == 0:
            return None
        name = n.target
        if name in ROW_REDUCE:
            src = _val(n.args[0])
            dims = n.args[1] if len(n.args) > 1 else None
            keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
            if src is None or not dims or len(dims) != 1 or dims[0] % src.dim() != src.dim() - 1 or not keep:
                return None
            return _row_space(src)
        if _elementwise_kind(n) is None:
            return None
        rows, h = _row_space(v)
        if h > MAX_FUSED_H or not all(_uniform_rows(_val(a)) for a in n.args if isinstance(a, fx.Node)):
            return None
        return rows, h

    def _partition(self, body: list[fx.Node]):
        out: list = []
        current: Group | None = None
        for n in body:
            if n.target in VIEW_OPS or n.target in MULTI_VIEW_OPS or n.target is operator.getitem:
                if current:
                    out.append(current)
                    current = None
                out.append(n)
                continue
            space = self._fusable(n)
            if space is not None and current is not None and self._fits(n, space, current):
                current.nodes.append(n)
                continue
            if current:
                out.append(current)
                current = None
            if space is not None and self._compatible(n, Group(space[0], space[1])):
                current = Group(space[0], space[1], [n])
            else:
                out.append(n)
        if current:
            out.append(current)
        return out

    def _fits(self, n: fx.Node, space: tuple[int, int], g: Group) -> bool:
        """Same rows and either the same width or a row vector ([rows, 1]) riding along."""
        rows, h = space
        if rows != g.rows or (h != g.h and h != 1):
            return False
        return self._compatible(n, g)

    def _compatible(self, n: fx.Node, g: Group) -> bool:
        for a in n.args:
            if isinstance(a, fx.Node) and a not in g.nodes and _val(a) is not None:
                if self._role(_val(a), g) is None:
                    return False
        return True

    def _role(self, t: torch.Tensor, g: Group) -> str | None:
        """How an outside tensor enters a group's [rows x h] tile: full, row vector, weight row, scalar."""
        shape = tuple(t.shape)
        if t.numel() == 1:
            return "scalar"
        if prod(shape[:-1]) == g.rows and shape[-1] == g.h:
            return "full"
        if shape[-1] == 1 and prod(shape[:-1]) == g.rows:
            return "rowvec"
        if t.numel() == g.h and shape[-1] == g.h:
            return "weight"
        return None

    # --- fused groups ------------------------------------------------------------------------------------
    def _emit_group(self, g: Group) -> None:
        P = self.kb.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
        kb = self.kb
        members = set(g.nodes)
        self.kernels += 1
        self.fused += len(g.nodes)
        needed = [n for n in g.nodes if n in self.graph_outputs or any(u not in members for u in n.users)]
        externals: list[fx.Node] = []
        for n in g.nodes:
            for a in n.args:
                if isinstance(a, fx.Node) and a not in members and a not in externals and _val(a) is not None:
                    externals.append(a)
        for n in needed:
            v = _tensor(n)
            meta = TensorMeta.contiguous(tuple(v.shape), device_dtype(v.dtype))
            self.values[n] = Value(meta.bind(self.program, f"t_{n.name}", "scratch"), meta)
        queues = [kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO1", "input")]
        q_out = kb.queue("qSyncIO2", "output")
        weights: dict[fx.Node, AP] = {}
        held: list[AP] = []
        squares = self.square_feeding_reduce(g.nodes)
        for r0 in range(0, g.rows, P):
            rows = min(P, g.rows - r0)
            tiles: dict[fx.Node, AP] = {}
            fresh: list[AP] = []
            for k, a in enumerate(externals):
                # an operand's loads belong to the first member that reads it
                with self.program.origin(member_label(next(n for n in g.nodes if a in n.args))):
                    self._load_external(k, a, g, rows, r0, queues, weights, tiles, fresh)
            for n in g.nodes:
                if n in squares:
                    continue  # folded into the reduction that consumes it
                # each member's instructions carry its op and source line: the device view groups and
                # colours a fused NEFF's instructions by the op (and line) they came from
                with self.program.origin(member_label(n)):
                    out = self.emit_member(n, g.h, rows, g.h, tiles, squares, temps=fresh)
                    tiles[n] = out
                    fresh.append(out)
                    if n in needed:
                        val = self.values[n]
                        cols = out.free_size
                        kb.dma(q_out, out, hbm(val.hbm, rows, cols if cols > 1 else 1, [(1, cols)], val.meta.dtype,
                                               offset=r0 * (cols if cols > 1 else 1)))
            kb.release(*held)
            held = fresh
        kb.release(*held, *weights.values())

    def _load_external(self, k: int, a: fx.Node, g: Group, rows: int, r0: int, queues, weights: dict,
                       tiles: dict, fresh: list) -> None:
        """Load operand ``a`` (from outside the group) for the row tile at ``r0``: a weight once for all
        tiles, a per-row scalar, or the tile's rows (full width or one column)."""
        kb = self.kb
        P = kb.spec.partitions
        role = self._role(_val(a), g)
        val = self.materialized(a)
        if role == "weight":
            if a not in weights:
                w = kb.tile(P, (g.h,), val.meta.dtype)
                kb.dma(queues[1], hbm(val.hbm, min(P, g.rows), 0, [(val.meta.stride[-1], g.h)],
                                      val.meta.dtype, offset=val.meta.offset), w.rows(0, min(P, g.rows)))
                weights[a] = w
            tiles[a] = weights[a].rows(0, rows)
            return
        if role == "scalar":
            t = kb.tile(rows, (1,), val.meta.dtype)
            kb.dma(queues[k % 2], hbm(val.hbm, rows, 0, [(1, 1)], val.meta.dtype, offset=val.meta.offset), t)
            tiles[a] = t
            fresh.append(t)
            return
        cols = g.h if role == "full" else 1
        pstride, cstride = _row_strides(val.meta, g)
        t = kb.tile(rows, (cols,), val.meta.dtype)
        kb.dma(queues[k % 2], hbm(val.hbm, rows, pstride, [(cstride, cols)], val.meta.dtype,
                                  offset=val.meta.offset + r0 * pstride), t)
        tiles[a] = t
        fresh.append(t)

    def square_feeding_reduce(self, nodes) -> set[fx.Node]:
        """Squares whose only user is a sum/mean of the group: one ACTIVATE(square, accumulate) does both."""
        out = set()
        for n in nodes:
            if n.target in (aten.sum.dim_IntList, aten.mean.dim):
                src = n.args[0]
                if isinstance(src, fx.Node) and src in nodes and len(src.users) == 1 and \
                        src not in self.graph_outputs and _is_square(src):
                    out.add(src)
        return out

    def emit_member(self, n: fx.Node, h: int, rows: int, cols: int, tiles: dict, squares: set,
                     out: AP | None = None, temps: list | None = None) -> AP:
        """One group member on a [rows x cols] tile (cols: h, or a column slice of the row for
        element-wise members); ``h`` is the row length reductions see. Writes ``out`` when given;
        temporaries go to ``temps`` (released with the tile's other tiles)."""
        kb = self.kb
        v = _tensor(n)
        dt = device_dtype(v.dtype)
        if n.target in ROW_REDUCE:
            src = n.args[0]
            alu = ROW_REDUCE[n.target]
            mean = n.target is aten.mean.dim
            out = out if out is not None else kb.tile(rows, (1,), dt)
            if src in squares:
                base = tiles[src.args[0]]
                junk = kb.tile(rows, (cols,), base.dtype)
                scale = 1.0 / math.sqrt(h) if mean else 1.0
                kb.emit(Activation(func=Act.SQUARE, inp=base, out=junk, scale=scale, accum_out=out))
                kb.release(junk)
                return out
            kb.emit(TensorReduce(alu=alu, inp=tiles[src], out=out))
            if mean:
                kb.emit(TensorScalar(inp=out, out=out, alu0=Alu.MULTIPLY, scalar0=1.0 / h))
            return out
        kind, what = _elementwise_kind(n)
        operands = [a for a in n.args if isinstance(a, (fx.Node, int, float))]
        shape_cols = 1 if (v.dim() and v.shape[-1] == 1 and h != 1) else cols
        out = out if out is not None else kb.tile(rows, (shape_cols,), dt)
        if kind == "unary":
            kb.emit(Activation(func=what, inp=tiles[operands[0]], out=out))
            return out
        if kind == "cast":
            kb.copy(tiles[operands[0]], out)
            return out
        if kind == "pow":
            exponent = float(n.args[1])
            special = {2.0: Act.SQUARE, 0.5: Act.SQRT, -0.5: Act.RSQRT, -1.0: Act.RECIPROCAL}
            if exponent in special:
                kb.emit(Activation(func=special[exponent], inp=tiles[n.args[0]], out=out))
            else:
                kb.emit(TensorScalar(inp=tiles[n.args[0]], out=out, alu0=Alu.POW, scalar0=exponent))
            return out
        # binary
        a, b = n.args[0], n.args[1]
        alpha = n.kwargs.get("alpha", 1)
        ta = tiles.get(a) if isinstance(a, fx.Node) else None
        tb = tiles.get(b) if isinstance(b, fx.Node) else None
        if tb is not None and alpha != 1:
            scaled = kb.tile(rows, (tb.free_size,), "float32")
            if temps is not None:
                temps.append(scaled)
            kb.emit(TensorScalar(inp=tb, out=scaled, alu0=Alu.MULTIPLY, scalar0=float(alpha)))
            tb = scaled
        if tb is None or ta is None:
            if tb is not None:      # scalar <op> tensor
                tensor, scalar, reverse = tb, float(a), True
            elif ta is not None:    # tensor <op> scalar
                tensor, scalar, reverse = ta, float(b) * (alpha if what in (Alu.ADD, Alu.SUBTRACT) else 1), False
            else:
                raise GraphCompileError(f"{n.name}: no tensor operand")
            kb.emit(TensorScalar(inp=tensor, out=out, alu0=what, scalar0=scalar, reverse0=reverse))
            return out
        wa, wb = ta.free_size, tb.free_size
        if wa == shape_cols and wb == 1 and shape_cols > 1:
            kb.emit(TensorScalar(inp=ta, out=out, alu0=what, scalar0=tb))
        elif wb == shape_cols and wa == 1 and shape_cols > 1:
            kb.emit(TensorScalar(inp=tb, out=out, alu0=what, scalar0=ta, reverse0=True))
        else:
            kb.emit(TensorTensor(alu=what, in0=ta, in1=tb, out=out))
        return out

    # --- standalone ops ------------------------------------------------------------------------------------
    def _emit_node(self, n: fx.Node) -> None:
        v = n.meta.get("val")
        if n.target in VIEW_OPS:
            base = self.materialized(n.args[0])
            t = _tensor(n)
            self.values[n] = Value(base.hbm, TensorMeta(tuple(t.shape), tuple(t.stride()), device_dtype(t.dtype),
                                                          base.meta.offset + t.storage_offset()
                                                          - _tensor(n.args[0]).storage_offset()))
            return
        if n.target in MULTI_VIEW_OPS:
            base = self.materialized(n.args[0])
            src = _tensor(n.args[0])
            for i, t in enumerate(v):
                self.values[(n, i)] = Value(base.hbm, TensorMeta(
                    tuple(t.shape), tuple(t.stride()), device_dtype(t.dtype),
                    base.meta.offset + t.storage_offset() - src.storage_offset()))
            return
        if n.target is operator.getitem:
            parent = n.args[0]
            if (parent, n.args[1]) in self.values:
                self.values[n] = self.values[(parent, n.args[1])]
            return
        if n.target is aten.clone.default and self._alias_clone(n):
            return
        outs = v if isinstance(v, (tuple, list)) else (v,)
        name = op_name(n.target)
        fn = _REGISTRY.get(name) or LINKED.get(name)
        if fn is None:
            raise NoLowering(name)
        args = tuple(self._arg_tensor(a) for a in n.args)
        kwargs = {k: self._arg_tensor(a) for k, a in n.kwargs.items()}
        call = from_aten(n.target, args, kwargs, tuple(o for o in outs if isinstance(o, torch.Tensor)))
        slots = _tensor_args_padded(n, call)
        input_ids = HbmInputs(self.materialized(a).hbm if a is not None else None for a in slots)
        out_ids = []
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor):
                meta = TensorMeta.contiguous(tuple(o.shape), device_dtype(o.dtype))
                idx = meta.bind(self.program, f"t_{n.name}_{i}", "scratch")
                out_ids.append(idx)
                value = Value(idx, meta)
                if isinstance(v, (tuple, list)):
                    self.values[(n, i)] = value
                else:
                    self.values[n] = value
        call = OpCall(call.name, tuple(self._rebase(m, a) for m, a in zip(call.inputs, slots)),
                      tuple(TensorMeta.contiguous(m.shape, m.dtype) for m in call.outputs), call.attrs)
        ctx = LoweringContext(call, self.kb, input_ids, out_ids, name)
        with self.program.origin(member_label(n)):  # op and source line, as fused members say
            run_lowering(fn, ctx)
        self.kernels += 1

    def _alias_clone(self, n: fx.Node) -> bool:
        """A clone whose source is a dense scratch value nobody else reads is that value: the graph
        is functional, so no copy is needed (dropout's clone in eval mode, contiguous() of a fresh value)."""
        src = n.args[0]
        t = _val(n)
        if not isinstance(src, fx.Node) or src not in self.values or t is None or len(src.users) != 1 \
                or src in self.graph_outputs or not t.is_contiguous():
            return False
        val = self.values[src]
        decl = self.program.tensors[val.hbm]
        if decl.kind != "scratch" or val.meta.offset != 0 or not val.meta.is_contiguous() \
                or tuple(val.meta.shape) != tuple(t.shape) or val.meta.dtype != device_dtype(t.dtype):
            return False
        self.values[n] = val
        return True

    def _rebase(self, meta, node):
        if meta is None or node is None:
            return meta
        return self.materialized(node).meta

    def _arg_tensor(self, a):
        if isinstance(a, fx.Node):
            return _val(a) if _val(a) is not None else a.meta.get("val")
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg_tensor(x) for x in a)
        return a

    def materialized(self, node: fx.Node) -> Value:
        if node not in self.values:
            raise GraphCompileError(f"value {node.name} is used before it is computed in HBM")
        return self.values[node]

    def _as_output(self, node: fx.Node, position: int) -> int:
        val = self.values[node]
        decl = self.program.tensors[val.hbm]
        if decl.kind == "scratch" and val.meta.offset == 0 and val.meta.is_contiguous():
            self.program.tensors[val.hbm] = type(decl)(f"out{position}", decl.shape, decl.dtype, "output")
            return val.hbm
        # an input returned as is, or a view: copy it into its own output tensor
        t = _tensor(node)
        meta = TensorMeta.contiguous(tuple(t.shape), device_dtype(t.dtype))
        out = meta.bind(self.program, f"out{position}", "output")
        copy = _REGISTRY["aten::clone"]
        call = OpCall("aten::clone", (val.meta,), (meta,))
        # the copy of a returned value belongs to the line that made the value
        with self.program.origin(op_label("aten::clone", source_line(node))):
            run_lowering(copy, LoweringContext(call, self.kb, HbmInputs((val.hbm,)), [out], "aten::clone"))
        self.kernels += 1
        return out


def _uniform_rows(t: torch.Tensor | None) -> bool:
    """Can a fused tile loop read ``t``'s leading dims as rows with one partition stride?"""
    if t is None or t.dim() <= 1:
        return True
    lead = [(s, st) for s, st in zip(t.shape[:-1], t.stride()[:-1]) if s > 1]
    expect = lead[-1][1] if lead else 0
    for s, st in reversed(lead):
        if st != expect:
            return False
        expect = st * s
    return True


def _row_strides(meta: TensorMeta, g: Group) -> tuple[int, int]:
    """(row stride, column stride) of an external value laid over the group's rows."""
    if meta.ndim == 0:
        return 0, 0
    cstride = meta.stride[-1] if meta.shape[-1] > 1 else 1
    if meta.ndim == 1:
        return 0, cstride
    # rows are the flattened leading dims: they must be one uniform stride (contiguous leading dims)
    lead = [(s, st) for s, st in zip(meta.shape[:-1], meta.stride[:-1]) if s > 1]
    if not lead:
        return 0, cstride
    pstride = lead[-1][1]
    expect = pstride
    for s, st in reversed(lead):
        if st != expect:
            raise GraphCompileError("non-uniform row strides in a fused operand")
        expect = st * s
    return pstride, cstride


def _is_square(n: fx.Node) -> bool:
    if n.target is aten.pow.Tensor_Scalar and float(n.args[1]) == 2.0:
        return True
    return n.target is aten.mul.Tensor and len(n.args) == 2 and n.args[0] is n.args[1]


_UNARY = {getattr(aten, k).default: v for k, v in UNARY_ACT.items() if hasattr(aten, k) and
          hasattr(getattr(aten, k), "default")}
_BINARY = {}
for _k, _alu in BINARY_ALU.items():
    _op = getattr(aten, _k, None)
    if _op is None:
        continue
    for _ov in ("Tensor", "Scalar"):
        if hasattr(_op, _ov):
            _BINARY[getattr(_op, _ov)] = _alu


def _elementwise_kind(n: fx.Node):
    if n.target in _UNARY:
        return "unary", _UNARY[n.target]
    if n.target is aten.gelu.default:
        return "unary", Act.GELU_TANH if n.kwargs.get("approximate", "none") == "tanh" else Act.GELU
    if n.target is aten._to_copy.default and _is_float_cast(n):
        return "cast", None
    if n.target is aten.pow.Tensor_Scalar:
        return "pow", None
    if n.target in _BINARY and n.target is not aten.pow.Tensor_Tensor:
        return "binary", _BINARY[n.target]
    return None


def _is_float_cast(n: fx.Node) -> bool:
    """``_to_copy`` that only changes a floating dtype (no device, layout or memory-format change)."""
    if set(n.kwargs) - {"dtype"} or len(n.args) != 1:
        return False
    src, out = _val(n.args[0]) if isinstance(n.args[0], fx.Node) else None, _val(n)
    return src is not None and out is not None and src.dtype.is_floating_point and out.dtype.is_floating_point \
        and src.device == out.device


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    else:
        yield x


def _tensor_args(n: fx.Node):
    out = []
    for a in n.args:
        if isinstance(a, fx.Node) and _val(a) is not None:
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(x for x in a if isinstance(x, fx.Node))
    return out


def _tensor_args_padded(n: fx.Node, call: OpCall):
    """Graph nodes aligned with the OpCall's input slots (None where the slot holds no tensor)."""
    nodes = iter(_tensor_args(n))
    out = []
    for m in call.inputs:
        out.append(next(nodes, None) if m is not None else None)
    return out


def compile_graph(gm: fx.GraphModule, spec: HardwareSpec | None = None, name: str = "graph",
                  epilogues: bool = True) -> CompiledGraph:
    """``epilogues=False`` keeps every matmul's output in HBM (the unfused baseline benchmarks compare).
    At LNC=2 the graph's Program is spread over the logical core's physical cores (``compiler.lnc``)."""
    spec = spec or get_spec()
    made: list[CompiledGraph] = []

    def build(make_builder) -> Program:
        made.append(GraphCompiler(gm, spec, name, epilogues, make_builder).compile())
        return made[-1].program

    program = spread(build, spec)
    compiled = next(c for c in reversed(made) if c.program is program)
    return compiled


def source_line(n: fx.Node) -> str:
    """The user's source line an FX node came from (the last frame of its ``stack_trace``), as
    ``file.py:12`` (``trnscope.sourceline``); "" when the graph does not say."""
    found = re.findall(r'File "([^"]+)", line (\d+)', n.meta.get("stack_trace") or "")
    if not found:
        return ""
    path, line = found[-1]
    return SourceLine(display_path(path), int(line)).location


def member_label(n: fx.Node) -> str:
    """The framework-op label of a member's instructions: its ATen op and source line."""
    name = op_name(n.target) if isinstance(n.target, torch._ops.OpOverload) else str(n.target)
    return op_label(name, source_line(n))
