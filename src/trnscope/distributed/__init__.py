"""Multi-rank runs on emulated NeuronCores: the ``neuron`` torch.distributed backend.

``register()`` (run by ``import trnscope``) registers the backend as TorchNeuron does, so
``dist.init_process_group(backend="neuron")`` works under ``torchrun`` and ``trnscope run --nproc N``.
See docs/distributed.md.
"""

from __future__ import annotations

_registered = False


def register() -> None:
    """Register the ``neuron`` backend with torch.distributed (idempotent) and the optimizer hook that
    orders collectives nobody waited for before the step that reads their results."""
    global _registered
    if _registered:
        return
    import torch.distributed as dist

    if not dist.is_available():
        return
    from .backend import BACKEND, create_neuron_process_group

    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create_neuron_process_group, extended_api=True, devices=[BACKEND])
    import torch.optim.optimizer as optim

    optim.register_optimizer_step_pre_hook(_wait_collectives)
    _registered = True


def _wait_collectives(optimizer, args, kwargs) -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    from .backend import ProcessGroupNeuron

    for pg in list(dist.distributed_c10d._world.pg_map):
        if isinstance(pg, ProcessGroupNeuron):
            pg.wait_outstanding()
