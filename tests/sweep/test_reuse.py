"""A case study's sweep reuses its base sweep's finished runs (``reuse``), and a sweep folder grows by new
groups (the base's d = 80 column) without touching what it finished."""

from __future__ import annotations

import json

import pytest

from loopscale.config import from_dict
from loopscale.errors import UserError
from loopscale.sweep.plan import plan_sweep
from loopscale.sweep.presets import preset
from loopscale.sweep.rundir import REUSE_FILE, init_sweep, open_sweep, run_dir, run_state
from loopscale.sweep.spec import SweepSpec

MODEL = {"depth": 4, "prelude": 1, "coda": 1, "head_dim": 16, "vocab_size": 64, "seq_len": 16}
GRID = [{"budget": 1e9, "widths": [16, 32]}]


def _spec(data, groups, reuse=()):
    return from_dict(
        SweepSpec,
        {
            "name": "tiny",
            "batch_tokens": 256,
            "model": MODEL,
            "train": {"data": {"path": str(data)}, "optim": {"ref_r_looped": 2}},
            "groups": groups,
            "reuse": list(reuse),
        },
        "spec",
    )


def _finish(root, name, status="ok", loss=3.25):
    folder = run_dir(root, name)
    (folder / "config.yaml").write_text("model: {}\n")
    (folder / "metrics.jsonl").write_text('{"step": 1}\n')
    (folder / "result.json").write_text(json.dumps({"status": status, "val_loss": loss, "reason": None}))


def test_finished_identical_runs_are_copied_not_retrained(tmp_path, tiny_dataset, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base_groups = [{"name": "main", "rs": [1, 2], "grid": GRID}]
    init_sweep(_spec(tiny_dataset, base_groups), tmp_path / "base")
    _finish("base", "main_C1e9_d16_r1")
    _finish("base", "main_C1e9_d32_r1", status="failed")
    _finish("base", "main_C1e9_d16_r2")  # r = 2: the variant's own group, another config
    variant_groups = [
        {"name": "main", "rs": [1], "grid": GRID},
        {"name": "main-v", "rs": [2], "grid": GRID, "bptt": "1"},
    ]
    out = tmp_path / "variant"
    init_sweep(_spec(tiny_dataset, variant_groups, reuse=["base"]), out)
    reused = run_dir(out, "main_C1e9_d16_r1")
    assert run_state(out, "main_C1e9_d16_r1").status == "ok"
    assert (reused / "result.json").read_bytes() == (
        tmp_path / "base/runs/main_C1e9_d16_r1/result.json"
    ).read_bytes()
    source = json.loads((reused / REUSE_FILE).read_text())["source"]
    assert source == "../../../base/runs/main_C1e9_d16_r1"  # relative: the published folder holds no path
    assert run_state(out, "main_C1e9_d32_r1").status == "pending"  # a failed source run is trained anew
    assert run_state(out, "main-v_C1e9_d16_r2").status == "pending"


def test_a_reuse_folder_that_does_not_exist_is_one_line(tmp_path, tiny_dataset, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = _spec(tiny_dataset, [{"name": "main", "rs": [1], "grid": GRID}], reuse=["nowhere"])
    with pytest.raises(UserError, match="reuse: nowhere is not a sweep folder"):
        init_sweep(spec, tmp_path / "variant")


def test_a_sweep_grows_by_new_groups_and_refuses_other_changes(tmp_path, tiny_dataset, capsys):
    groups = [{"name": "main", "rs": [1, 2], "grid": GRID}]
    out = tmp_path / "sweep"
    init_sweep(_spec(tiny_dataset, groups), out)
    _finish(out, "main_C1e9_d16_r1")
    before = (run_dir(out, "main_C1e9_d16_r1") / "result.json").read_bytes()
    wide = {"name": "wide", "rs": [1, 2], "grid": [{"budget": 1e9, "widths": [48]}]}
    runs = init_sweep(_spec(tiny_dataset, [*groups, wide]), out)
    assert len(runs) == 6 and "extended by 2 run(s)" in capsys.readouterr().err
    assert len(open_sweep(out)[1]) == 6
    assert (run_dir(out, "main_C1e9_d16_r1") / "result.json").read_bytes() == before
    changed = [{**groups[0], "grid": [{"budget": 2e9, "widths": [16, 32]}]}, wide]
    with pytest.raises(UserError, match="already holds a different sweep"):
        init_sweep(_spec(tiny_dataset, changed), out)


def test_the_case_study_presets_pair_every_looped_cell_of_the_base_and_reuse_its_anchors():
    base = {(r.budget, r.width, r.r, r.seed) for r in plan_sweep(preset("laptop"))}
    for name, key in (("laptop-truncated-bptt", "bptt_k"), ("laptop-hyperconnections", "injection")):
        spec = preset(name)
        runs = plan_sweep(spec)
        assert spec.reuse == ["results/laptop-factorial"]
        anchors = {(r.budget, r.width, r.r, r.seed) for r in runs if r.r == 1}
        looped = {(r.budget, r.width, r.r, r.seed) for r in runs if r.r > 1}
        assert anchors == {k for k in base if k[2] == 1}  # every r = 1 run is the base's own
        assert looped == {k for k in base if k[2] > 1}  # the same looped cells, seeds included
        assert sum(1 for r in runs if r.r > 1 and r.seed == 1) == 9  # replicates: the variant's own noise
        variant = [r for r in runs if r.r > 1]
        if key == "bptt_k":
            assert all(r.model.bptt_k == -(-r.r // 2) for r in variant)
        else:
            assert all(r.model.injection == "hyperconnect" and r.model.hc_lanes == 2 for r in variant)
