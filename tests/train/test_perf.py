"""The matmul peak probe and its cache, and the tcmalloc switch."""

from __future__ import annotations

import json

import pytest
import torch

from loopscale.train import perf

torch.set_num_threads(1)


def set_load(monkeypatch, load_1min: float, cores: int = 4) -> None:
    monkeypatch.setattr(perf.os, "getloadavg", lambda: (load_1min, 0.0, 0.0))
    monkeypatch.setattr(perf.os, "cpu_count", lambda: cores)


def fake_probes(monkeypatch, *values: float) -> list:
    probes, calls = iter(values), []

    def probe(device, dtype_name):
        calls.append((device, dtype_name))
        return next(probes)

    monkeypatch.setattr(perf, "measure_matmul_peak", probe)
    return calls


def test_peak_flops_is_cached_keeps_the_best_and_refreshes_when_stale(tmp_path, monkeypatch):
    monkeypatch.setenv(perf.CACHE_ENV, str(tmp_path))
    set_load(monkeypatch, 0.4)  # idle: 0.1 per core
    calls = fake_probes(monkeypatch, 0.9e11, 1.25e11, 1.1e11)
    assert perf.peak_flops("cpu", "float32", now=0.0) == 0.9e11
    assert perf.peak_flops("cpu", "float32", now=perf.PEAK_MAX_AGE_S) == 0.9e11  # fresh: cached
    assert len(calls) == 1
    assert perf.peak_flops("cpu", "float32", now=perf.PEAK_MAX_AGE_S + 1) == 1.25e11  # stale: faster wins
    later = 2 * perf.PEAK_MAX_AGE_S + 2
    assert perf.peak_flops("cpu", "float32", now=later) == 1.25e11  # a lower probe never lowers the peak
    assert len(calls) == 3
    table = json.loads((tmp_path / perf.PEAK_CACHE_FILE).read_text())
    (key, entry), = table.items()
    assert "float32" in key
    assert entry == {"flops": 1.25e11, "measured_at": later, "load_1min": 0.4, "cores": 4}


def test_a_probe_under_load_is_never_cached_as_the_peak(tmp_path, monkeypatch):
    """Issue 20: a probe under load (22 GFLOP/s against 165 idle) was cached as the best and inflated
    every MFU after it. Under load it is kept only as provisional, flagged busy, until an idle probe."""
    monkeypatch.setenv(perf.CACHE_ENV, str(tmp_path))
    calls = fake_probes(monkeypatch, 2.2e10, 1.65e11, 9e10)
    set_load(monkeypatch, 6.0)  # 1.5 per core
    busy = perf.peak_measurement("cpu", "float32", now=0.0)
    assert busy.flops == 2.2e10 and busy.busy
    assert busy.load.note("MFU reads high") == "machine busy: load 6.0 on 4 cores; MFU reads high"
    again = perf.peak_measurement("cpu", "float32", now=10.0)  # still busy: the provisional value, no probe
    assert (again.flops, again.busy, len(calls)) == (2.2e10, True, 1)
    set_load(monkeypatch, 1.0)
    idle = perf.peak_measurement("cpu", "float32", now=20.0)  # idle: measured again and cached as the peak
    assert (idle.flops, idle.busy, len(calls)) == (1.65e11, False, 2)
    set_load(monkeypatch, 6.0)
    stale = perf.peak_measurement("cpu", "float32", now=20.0 + 2 * perf.PEAK_MAX_AGE_S)
    assert (stale.flops, stale.busy, len(calls)) == (1.65e11, False, 2)  # stale but idle beats a busy probe


def test_an_entry_without_a_recorded_load_is_measured_again_on_an_idle_machine(tmp_path, monkeypatch):
    monkeypatch.setenv(perf.CACHE_ENV, str(tmp_path))
    key = f"cpu|4cpus|{torch.get_num_threads()}threads|float32"
    set_load(monkeypatch, 0.0)
    (tmp_path / perf.PEAK_CACHE_FILE).write_text(json.dumps({key: {"flops": 2.2e10, "measured_at": 0.0}}))
    fake_probes(monkeypatch, 1.6e11)
    assert perf.peak_flops("cpu", "float32", now=1.0) == 1.6e11  # fresh, but of unknown load: re-measured


@pytest.mark.parametrize(("load", "cores", "busy"), [(1.0, 2, False), (1.1, 2, True), (7.9, 16, False)])
def test_the_machine_is_busy_above_half_a_process_per_core(monkeypatch, load, cores, busy):
    set_load(monkeypatch, load, cores)
    assert perf.machine_load().busy == busy
    assert (perf.machine_load().note("ETA may be longer") is not None) == busy


def test_an_unreadable_entry_is_measured_again_and_the_old_cache_file_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv(perf.CACHE_ENV, str(tmp_path))
    set_load(monkeypatch, 0.0)
    key = f"cpu|{perf.os.cpu_count()}cpus|{torch.get_num_threads()}threads|float32"
    (tmp_path / perf.PEAK_CACHE_FILE).write_text(json.dumps({key: 9.4e10}))
    old = tmp_path / "peak_flops.json"  # what older loopscale versions read (bare numbers)
    old.write_text(json.dumps({key: 9.4e10}))
    monkeypatch.setattr(perf, "measure_matmul_peak", lambda device, dtype_name: 2.0e11)
    assert perf.peak_flops("cpu", "float32") == 2.0e11
    assert json.loads(old.read_text()) == {key: 9.4e10}


def test_matmul_probe_counts_two_n_cubed_flops(monkeypatch):
    ticks = iter([0.0, 0.5] * 10)  # every timed matmul "takes" 0.5 s
    monkeypatch.setattr(perf.time, "perf_counter", lambda: next(ticks))
    assert perf.measure_matmul_peak("cpu", "float32", size=64, repeats=3) == pytest.approx(2 * 64**3 / 0.5)


@pytest.mark.parametrize(("value", "enabled"), [("1", False), ("0", True), ("", True)])
def test_tcmalloc_can_be_disabled(monkeypatch, value, enabled):
    monkeypatch.setenv(perf.NO_TCMALLOC_ENV, value)
    monkeypatch.setattr(perf.glob, "glob", lambda pattern: ["/usr/lib/x/libtcmalloc_minimal.so.4"])
    assert (perf.tcmalloc_library() is not None) == enabled
