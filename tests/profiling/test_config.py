"""NeuronConfig / ProfileMode: TorchNeuron's arguments, validated with clear errors."""

import pytest
import torch

from trnscope.profiling import NeuronConfig, ProfileMode, parse_nc_list


def test_is_an_experimental_config_with_torchneuron_defaults(tmp_path):
    cfg = NeuronConfig()
    assert isinstance(cfg, torch._C._profiler._ExperimentalConfig)
    assert cfg.modes == [ProfileMode.DEVICE, ProfileMode.RUNTIME]
    assert str(cfg.profile_output_dir) == "profile_output"
    assert cfg.max_events_per_nc == 1_000_000
    assert cfg.capture_enabled_for_nc is None and cfg.nc_set is None
    assert cfg.precache_node_info is True and cfg.correlate_device_time is True
    # the TorchNeuron-style key:value string rides along to the (absent) Kineto plugin
    assert "max_events_per_nc:1000000" in cfg.custom_profiler_config
    # other _ExperimentalConfig options pass through
    assert isinstance(NeuronConfig(profile_all_threads=True), NeuronConfig)


def test_all_modes_and_names():
    assert {m.name for m in ProfileMode} == {"DEVICE", "RUNTIME", "CPU_UTIL", "HOST_MEMORY"}
    cfg = NeuronConfig(modes=["device", "CPU_UTIL", ProfileMode.HOST_MEMORY, ProfileMode.DEVICE])
    assert cfg.modes == [ProfileMode.DEVICE, ProfileMode.CPU_UTIL, ProfileMode.HOST_MEMORY]


@pytest.mark.parametrize("modes, match", [
    (["GPU"], "not a profile mode"),
    ([42], "not a profile mode"),
    ([], "modes is empty"),
])
def test_bad_modes(modes, match):
    with pytest.raises(ValueError, match=match):
        NeuronConfig(modes=modes)


def test_nc_lists():
    assert parse_nc_list("0,1,2-5") == {0, 1, 2, 3, 4, 5}
    assert parse_nc_list(" 3 ") == {3}
    assert parse_nc_list(None) is None
    assert parse_nc_list([0, 2]) == {0, 2}
    assert NeuronConfig(capture_enabled_for_nc="0-1").nc_set == {0, 1}


@pytest.mark.parametrize("spec, match", [
    ("0,a", "'a' in '0,a' is not a NeuronCore index"),
    ("5-2", "range '5-2'"),
    ("-1", "is empty or negative|not a NeuronCore index"),
    ("", "empty string"),
    ([1, -2], "NeuronCore indices"),
    (1.5, "not a NeuronCore list"),
])
def test_bad_nc_lists(spec, match):
    with pytest.raises(ValueError, match=match):
        NeuronConfig(capture_enabled_for_nc=spec)


@pytest.mark.parametrize("value", [0, -5, 1.5, "10", True])
def test_bad_max_events(value):
    with pytest.raises(ValueError, match="max_events_per_nc must be a positive int"):
        NeuronConfig(max_events_per_nc=value)


def test_neff_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    assert NeuronConfig().neff_cache_dir == tmp_path
    assert NeuronConfig(neff_cache_dir=tmp_path / "x").neff_cache_dir == tmp_path / "x"
