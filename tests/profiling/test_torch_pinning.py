"""trnscope.profiling hooks four methods of torch.autograd.profiler.profile (torch 2.13). If torch
moves them, these tests fail first and say what moved."""

import torch
import torch.autograd.profiler as ap

import trnscope.profiling as tp
from trnscope.device import torch_adaptations
from trnscope.profiling import capture


def test_torch_internals_are_what_the_hooks_expect():
    assert torch.__version__.startswith(torch_adaptations.PINNED_TORCH), torch.__version__
    assert tp.check_torch_internals() == []


def test_hooks_are_installed_on_the_autograd_profile():
    assert capture.installed()
    for name in ("_start_trace", "__exit__", "_parse_kineto_results", "export_chrome_trace"):
        assert getattr(ap.profile, name).__module__ == capture.__name__, name
        assert name in capture.ORIGINALS


def test_torch_profiler_still_funnels_windows_through_the_autograd_profile():
    # torch.profiler.profile -> _KinetoProfile.{prepare,start,stop}_trace -> prof.profile._start_trace / __exit__
    import inspect

    from torch.profiler import profiler as tpp

    src = inspect.getsource(tpp._KinetoProfile.start_trace) + inspect.getsource(tpp._KinetoProfile.stop_trace)
    assert "self.profiler._start_trace()" in src
    assert "self.profiler.__exit__(None, None, None)" in src
    assert "_parse_kineto_results" in inspect.getsource(ap.profile._ensure_function_events)


def test_a_session_without_neuronconfig_is_untouched(xw):
    x, _ = xw
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        (x * 2).sum()
    assert getattr(prof.profiler, "_trnscope_window", None) is None
    names = {e.name for e in prof.events()}
    assert "aten::mul" in names and not any(n.startswith("trnscope::") for n in names)
