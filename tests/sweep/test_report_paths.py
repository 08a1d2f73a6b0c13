"""What a report publishes about the machine it ran on: no absolute path in any file it writes (a sweep given
by its absolute path, a report folder outside the sweep, a dataset by its absolute path), and no utilisation
figure against a matmul peak that was probed while other work loaded the machine."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path

import pytest

from loopscale.cli import main
from loopscale.published import absolute_paths
from loopscale.train.perf import MachineLoad, PeakFlops

from .helpers import synthetic_sweep

TEXT_SUFFIXES = (".md", ".html", ".json", ".csv", ".yaml", ".txt", ".log")


def _report(sweep: Path, *extra: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(sweep), "--restarts", "20", "--bootstrap", "0", *extra]) == 0


def _written_text(folder: Path) -> dict[Path, str]:
    """Every text file under ``folder`` (the PNG figures are binary) plus the marker file."""
    files = [p for p in folder.rglob("*") if p.suffix in TEXT_SUFFIXES or p.name.startswith(".")]
    return {p: p.read_text() for p in files if p.is_file()}


@pytest.mark.parametrize("dataset, out", [("present", "elsewhere"), ("missing", "default")])
def test_a_report_of_an_absolute_sweep_path_writes_no_absolute_path(tmp_path, tiny_dataset, dataset, out):
    """The dataset by its absolute path (present: fit.json names it; missing: the note says why there are no
    baselines), the report in SWEEP/report or in a folder outside the sweep."""
    sweep = (tmp_path / "sweep").absolute()
    data = {"path": str(tiny_dataset), "val_tokens": 256} if dataset == "present" else None
    synthetic_sweep(sweep, "demo", data=data)  # without data: an absolute path to a dataset that is missing
    if out == "default":
        folder = sweep / "report"
        _report(sweep)
    else:
        folder = (tmp_path / "published" / "report").absolute()
        _report(sweep, "--out", str(folder))
    written = _written_text(folder)
    assert folder / "fit.json" in written and folder / "report.md" in written
    for path, text in written.items():
        assert str(tmp_path) not in text and not absolute_paths(text), path
    # the relative paths it writes instead lead to the files they name, from the report's folder
    md = written[folder / "report.md"]
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert figures and all((folder / figure).is_file() for figure in figures)
    template = re.search(r"the sweep's template \(([^)]+)\)", written[folder / "fit.json"]).group(1)
    assert (folder / template).resolve() == (sweep / "sweep.yaml").resolve()
    baselines = json.loads(written[folder / "fit.json"])["baselines"]
    if dataset == "present":
        assert (folder / baselines["dataset"]).resolve() == tiny_dataset.resolve()
    else:
        assert "not available" in baselines["note"] and "no-dataset" in baselines["note"]


def _timed_rows() -> list[dict]:
    """Two finished runs, 3e12 training FLOPs over 30 s of busy wall: 100 GFLOP/s achieved."""
    row = {"status": "ok", "flops_per_token": 1e9, "tokens": 1500, "wall_time_s": 15, "train_time_s": 14}
    return [{**row, "started_at": 0, "finished_at": 15}, {**row, "started_at": 15, "finished_at": 30}]


@pytest.mark.parametrize(
    "load, expected",
    [
        (MachineLoad(0.4, 2), "100.0 GFLOP/s = 25.0% of the fp32 matmul peak of this machine (400 GFLOP/s"),
        (
            MachineLoad(3.0, 2),
            "100.0 GFLOP/s; no utilisation: peak not measured on an idle machine (load 3.0 on 2 cores)",
        ),
        (MachineLoad(math.inf, 1), "peak not measured on an idle machine (load not recorded)"),
    ],
    ids=["idle", "busy", "legacy"],
)
def test_machine_utilisation_only_against_a_peak_probed_on_an_idle_machine(monkeypatch, load, expected):
    from loopscale.analysis.machine import machine_use
    from loopscale.cli.sweep import _machine_line
    from loopscale.fit.protocol_results import PeakLoad
    from loopscale.report.machine import machine_section

    probes = []
    monkeypatch.setattr(
        "loopscale.train.perf.peak_measurement",
        lambda device, dtype: probes.append((device, dtype)) or PeakFlops(4e11, load),
    )
    use = machine_use(_timed_rows())
    assert probes == [("cpu", "float32")]
    assert use.achieved_flops_per_s == pytest.approx(1e11) and use.peak_flops_per_s == 4e11
    line = next(s for s in machine_section(use).blocks if s.startswith("Busy wall time"))
    assert expected in line and expected in _machine_line(_timed_rows())
    if load.busy:
        assert use.utilisation is None and "%" not in line
        assert use.peak_load == PeakLoad(load_1min=load.load_1min, cores=load.cores)
    else:
        assert use.utilisation == pytest.approx(0.25) and use.peak_load is None
