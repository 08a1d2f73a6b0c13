"""The matmul peak probe and its cache, and the tcmalloc switch."""

from __future__ import annotations

import json

import pytest
import torch

from loopscale.train import perf

torch.set_num_threads(1)


def test_peak_flops_is_cached_keeps_the_best_and_refreshes_when_stale(tmp_path, monkeypatch):
    monkeypatch.setenv(perf.CACHE_ENV, str(tmp_path))
    probes = iter([0.9e11, 1.25e11, 1.1e11])  # the first probe ran under load
    calls = []

    def fake_probe(device, dtype_name):
        calls.append((device, dtype_name))
        return next(probes)

    monkeypatch.setattr(perf, "measure_matmul_peak", fake_probe)
    assert perf.peak_flops("cpu", "float32", now=0.0) == 0.9e11
    assert perf.peak_flops("cpu", "float32", now=perf.PEAK_MAX_AGE_S) == 0.9e11  # fresh: cached
    assert len(calls) == 1
    assert perf.peak_flops("cpu", "float32", now=perf.PEAK_MAX_AGE_S + 1) == 1.25e11  # stale: re-measured
    later = 2 * perf.PEAK_MAX_AGE_S + 2
    assert perf.peak_flops("cpu", "float32", now=later) == 1.25e11  # a lower probe never lowers the peak
    assert len(calls) == 3
    table = json.loads((tmp_path / perf.PEAK_CACHE_FILE).read_text())
    (key, entry), = table.items()
    assert "float32" in key and entry == {"flops": 1.25e11, "measured_at": later}


def test_an_unreadable_entry_is_measured_again_and_the_old_cache_file_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv(perf.CACHE_ENV, str(tmp_path))
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
