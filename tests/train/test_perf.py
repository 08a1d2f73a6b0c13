"""The matmul peak probe and its cache, and the tcmalloc switch."""

from __future__ import annotations

import json

import pytest
import torch

from loopscale.train import perf

torch.set_num_threads(1)


def test_peak_flops_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv(perf.CACHE_ENV, str(tmp_path))
    calls = []

    def fake_probe(device, dtype_name):
        calls.append((device, dtype_name))
        return 1.25e11

    monkeypatch.setattr(perf, "measure_matmul_peak", fake_probe)
    assert perf.peak_flops("cpu", "float32") == 1.25e11
    assert perf.peak_flops("cpu", "float32") == 1.25e11
    assert calls == [("cpu", "float32")]
    table = json.loads((tmp_path / "peak_flops.json").read_text())
    assert list(table.values()) == [1.25e11] and "float32" in next(iter(table))


def test_matmul_probe_counts_two_n_cubed_flops(monkeypatch):
    ticks = iter([0.0, 0.5] * 10)  # every timed matmul "takes" 0.5 s
    monkeypatch.setattr(perf.time, "perf_counter", lambda: next(ticks))
    assert perf.measure_matmul_peak("cpu", "float32", size=64, repeats=3) == pytest.approx(2 * 64**3 / 0.5)


@pytest.mark.parametrize(("value", "enabled"), [("1", False), ("0", True), ("", True)])
def test_tcmalloc_can_be_disabled(monkeypatch, value, enabled):
    monkeypatch.setenv(perf.NO_TCMALLOC_ENV, value)
    monkeypatch.setattr(perf.glob, "glob", lambda pattern: ["/usr/lib/x/libtcmalloc_minimal.so.4"])
    assert (perf.tcmalloc_library() is not None) == enabled
