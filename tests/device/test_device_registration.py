"""Registration of PrivateUse1 as ``neuron`` and the ``torch.neuron`` device module."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import trnscope.device
from trnscope import hw

pytestmark = pytest.mark.usefixtures("host_executor")


def test_backend_is_named_neuron():
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.device("neuron").type == "neuron"
    t = torch.ones(2, device="neuron")
    assert t.device == torch.device("neuron", 0)
    assert t.is_neuron and not torch.ones(1).is_neuron
    assert torch.nn.Linear(2, 2).neuron().weight.is_neuron
    assert torch.ones(2).neuron().device.type == "neuron"


def test_torch_neuron_is_the_device_module():
    import trnscope.device.neuron as mod

    assert torch.neuron is mod
    assert sys.modules["torch.neuron"] is mod
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == hw.get_spec().cores_per_chip
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device(0)
    torch.neuron.set_device("neuron:0")
    with pytest.raises(RuntimeError, match="Invalid device neuron:99.*TRNSCOPE_INSTANCE"):
        torch.neuron.set_device(99)
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0
    torch.neuron.synchronize()
    assert hw.get_spec().neuroncore in torch.neuron.get_device_name()


def test_torch_accelerator_resolves_to_neuron():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == hw.get_spec().cores_per_chip
    assert torch.accelerator.current_device_index() == 0
    assert torch.accelerator.current_stream().device.type == "neuron"


def test_rng_functions():
    torch.neuron.manual_seed(123)
    a = torch.randn(4, device="neuron").cpu()
    state = torch.neuron.get_rng_state()
    b = torch.randn(4, device="neuron").cpu()
    torch.neuron.manual_seed_all(123)
    assert torch.equal(torch.randn(4, device="neuron").cpu(), a)
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.randn(4, device="neuron").cpu(), b)
    assert torch.neuron.initial_seed() == 123


def test_device_rng_is_its_own_stream_and_matches_cpu_for_same_seed():
    torch.manual_seed(5)  # seeds CPU and (through manual_seed_all) neuron
    cpu = torch.randn(6)
    torch.manual_seed(5)
    dev = torch.randn(6, device="neuron").cpu()
    assert torch.equal(cpu, dev)
    torch.manual_seed(5)
    torch.neuron.manual_seed(99)
    torch.randn(6, device="neuron")  # consumes the device stream, not the CPU one
    assert torch.equal(torch.randn(6), cpu)


def test_stream_and_event():
    s = torch.neuron.Stream()
    assert isinstance(s, torch.Stream) and s.device.type == "neuron"
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() is s
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    start.record()
    torch.ones(100, device="neuron").sum()
    end.record(s)
    end.synchronize()
    assert start.query() and s.query()
    assert start.elapsed_time(end) >= 0.0
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.neuron.Event().elapsed_time(end)
    s.synchronize()
    assert isinstance(s.record_event(), torch.neuron.Event)


def test_import_is_idempotent():
    import importlib

    from trnscope.device import registration

    registration.register()
    importlib.reload(trnscope.device)
    assert torch.neuron is trnscope.device.neuron


def _run(code: str) -> subprocess.CompletedProcess:
    # TRNSCOPE_NO_DEVICE=1: `import trnscope` itself stays light; trnscope.device still registers
    env = dict(os.environ, TRNSCOPE_NO_DEVICE="1")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
        env=env,
    )


def test_conflicting_privateuse1_backend_fails_clearly():
    r = _run(
        """
        import torch
        torch.utils.rename_privateuse1_backend("foo")
        try:
            import trnscope.device
        except ImportError as e:
            print("IMPORT-ERROR:", e)
        """
    )
    assert "IMPORT-ERROR:" in r.stdout, r.stderr
    assert "'foo'" in r.stdout and "neuron" in r.stdout


def test_foreign_neuron_backend_fails_clearly():
    r = _run(
        """
        import types, torch
        torch.utils.rename_privateuse1_backend("neuron")
        torch._register_device_module("neuron", types.ModuleType("torch_neuronx_fake"))
        try:
            import trnscope.device
        except ImportError as e:
            print("IMPORT-ERROR:", e)
        """
    )
    assert "IMPORT-ERROR:" in r.stdout, r.stderr
    assert "another backend" in r.stdout
