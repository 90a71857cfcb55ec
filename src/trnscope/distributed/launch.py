"""``trnscope run --nproc N script.py``: one rank per emulated NeuronCore, launched by torchrun.

The launcher is torch's own (``torch.distributed.run``); its ``--nnodes``, ``--node-rank`` and
``--rdzv-*`` options pass through, so several machines join one run as they do under torchrun. Each
worker is ``python -m trnscope run [--profile RUN/rank_<RANK>] script.py ARGS``: ``torch_neuronx``
(and ``nki``) resolve to trnscope, and the rank drives NeuronCore ``LOCAL_RANK`` of its instance
(``NEURON_RT_VISIBLE_CORES=LOCAL_RANK``, as TorchNeuron sets it up). With ``--profile RUN`` each rank
writes its profile directory under ``RUN/rank_<RANK>/`` and this node's launcher writes
``RUN/run.json``: the run's shape, the what-ifs in force and, at the end, which ranks finished.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

import orjson

RUN_SCHEMA = "trnscope-multirank-run"
RANK_DIR = "rank_{rank}"

# trnscope option -> torchrun option (values pass through unchanged)
PASSTHROUGH = {"nnodes": "--nnodes", "node_rank": "--node-rank", "rdzv_backend": "--rdzv-backend",
               "rdzv_endpoint": "--rdzv-endpoint", "rdzv_id": "--rdzv-id", "rdzv_conf": "--rdzv-conf",
               "master_addr": "--master-addr", "master_port": "--master-port", "max_restarts": "--max-restarts",
               "monitor_interval": "--monitor-interval"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("multi-rank (torchrun)")
    g.add_argument("--nproc", type=int, metavar="N", help="ranks on this node: one process per NeuronCore")
    g.add_argument("--nnodes", help="nodes (instances), or MIN:MAX (torchrun's --nnodes)")
    g.add_argument("--node-rank", dest="node_rank", type=int, help="this node's rank (torchrun's --node-rank)")
    g.add_argument("--rdzv-backend", dest="rdzv_backend", help="torchrun's --rdzv-backend (static, c10d, ...)")
    g.add_argument("--rdzv-endpoint", dest="rdzv_endpoint", help="torchrun's --rdzv-endpoint HOST:PORT")
    g.add_argument("--rdzv-id", dest="rdzv_id", help="torchrun's --rdzv-id")
    g.add_argument("--rdzv-conf", dest="rdzv_conf", help="torchrun's --rdzv-conf")
    g.add_argument("--master-addr", dest="master_addr", help="torchrun's --master-addr")
    g.add_argument("--master-port", dest="master_port", type=int, help="torchrun's --master-port")
    g.add_argument("--max-restarts", dest="max_restarts", type=int, help="torchrun's --max-restarts")
    g.add_argument("--monitor-interval", dest="monitor_interval", type=float, help="torchrun's --monitor-interval")


def wanted(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "nproc", None)) or any(getattr(args, k, None) is not None for k in PASSTHROUGH)


def torchrun_argv(args: argparse.Namespace) -> list[str]:
    """torchrun's arguments for this run: each worker runs ``python -m trnscope run ...``."""
    nproc = args.nproc or 1
    if nproc < 1:
        raise ValueError(f"--nproc {nproc}: give at least one process")
    argv = ["--nproc-per-node", str(nproc)]
    for key, flag in PASSTHROUGH.items():
        v = getattr(args, key, None)
        if v is not None:
            argv += [flag, str(v)]
    if getattr(args, "nnodes", None) in (None, "1") and getattr(args, "rdzv_backend", None) is None \
            and getattr(args, "rdzv_endpoint", None) is None and getattr(args, "master_port", None) is None:
        argv += ["--standalone"]  # one node: a private rendezvous on a free port, as `torchrun --standalone`
    worker = ["run"]
    if args.profile:
        worker += ["--profile", str(Path(args.profile).resolve())]
    worker += [str(Path(args.script).resolve()), *args.args]
    return argv + ["--module", "trnscope", *worker]


def rank_profile_dir(run_dir: Path) -> Path:
    """Inside a worker: where this rank writes its profile (``RUN/rank_<RANK>``)."""
    return Path(run_dir) / RANK_DIR.format(rank=int(os.environ.get("RANK", "0")))


def in_worker() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)


def _write_run(run_dir: Path, doc: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    node = doc.get("node_rank", 0)
    tmp = run_dir / f".run.json.{os.getpid()}"
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    os.replace(tmp, run_dir / ("run.json" if not node else f"run.node{node}.json"))


def launch(args: argparse.Namespace, console) -> int:
    from ..runtime.neff_cache import RUN_ENV
    from .whatif import link_scale, rank_slowdowns

    rank_slowdowns(), link_scale()  # a bad what-if fails here, once, not in every worker
    if getattr(args, "instance", None):
        os.environ["TRNSCOPE_INSTANCE"] = args.instance  # the workers emulate the same instance
    # the ranks' shared NEFF cache tells this run's entries from earlier runs' (runtime.neff_cache)
    own_id = RUN_ENV not in os.environ
    if own_id:
        os.environ[RUN_ENV] = uuid.uuid4().hex
    try:
        return _launch(args, console, os.environ[RUN_ENV])
    finally:
        if own_id:
            os.environ.pop(RUN_ENV, None)


def _launch(args: argparse.Namespace, console, run_id: str) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    from .whatif import LINK_ENV, RANK_ENV

    argv = torchrun_argv(args)
    run_dir = Path(args.profile).resolve() if args.profile else None
    nnodes = str(args.nnodes or "1")
    doc = {"schema": RUN_SCHEMA, "version": 1, "script": str(args.script), "args": list(args.args),
           "nproc_per_node": args.nproc or 1, "nnodes": nnodes, "node_rank": args.node_rank or 0,
           "instance": os.environ.get("TRNSCOPE_INSTANCE", ""), "whatif": {
               RANK_ENV: os.environ.get(RANK_ENV, ""), LINK_ENV: os.environ.get(LINK_ENV, "")},
           "run_id": run_id, "started_unix": time.time(), "complete": False, "failed_ranks": {}}
    if run_dir is not None:
        _write_run(run_dir, doc)
    rc = 0
    try:
        run(get_args_parser().parse_args(argv))
    except ChildFailedError as exc:
        rc = 1
        failed = {int(r): f"exit code {f.exitcode}" + (f" (signal {f.signal_name()})" if f.exitcode < 0 else "")
                  for r, f in exc.failures.items()}
        doc["failed_ranks"] = {str(r): v for r, v in failed.items()}
        names = ", ".join(f"rank {r} ({v})" for r, v in sorted(failed.items()))
        console.print(f"[bold red]error:[/] {names} failed; the other ranks were stopped. The first failure is "
                      f"the cause: see that rank's output above.")
    if run_dir is not None:
        doc["complete"] = rc == 0
        doc["ranks_written"] = sorted(int(p.name.split("_", 1)[1]) for p in run_dir.glob("rank_*")
                                      if p.name.split("_", 1)[1].isdigit())
        _write_run(run_dir, doc)
        console.print(f"run profiles under {run_dir} (trnscope summary {run_dir} / trnscope view {run_dir})")
    sys.stdout.flush()
    return rc
