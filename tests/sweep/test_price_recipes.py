"""Recipes as config changes (``--set``, ``--variant``, presets) and plugin recipes, priced end to end at tiny
size against a tiny base: the published laptop-factorial table (its law, seed noise and run times, so the
plan is the published one) with every budget divided by 10,000 and the tiny template of the sweep tests
(vocabulary 64, T = 16), so each variant run trains a few steps."""

from __future__ import annotations

import csv
import json
import os
import re
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

import loopscale.data
import loopscale.plugins
from loopscale.cli import main
from loopscale.errors import UserError
from loopscale.recipes import PRESETS, Recipe, recorded_recipe, resolve_recipe

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "results" / "laptop-factorial"
EXAMPLE = ROOT / "examples" / "recipes" / "loop-embedding" / "src"
PLUGIN = EntryPoint(name="loop-embedding", value="loopscale_loop_embedding:RECIPE", group="loopscale.recipes")


@pytest.fixture(scope="module")
def tiny_base(tiny_dataset, tmp_path_factory) -> Path:
    """laptop-factorial's table at budgets / 10,000 and the tiny template, as a base sweep folder."""
    base = tmp_path_factory.mktemp("base")
    with open(PUBLISHED / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row["budget"] = repr(float(row["budget"]) / 1e4)
    with open(base / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    spec = yaml.safe_load((PUBLISHED / "sweep.yaml").read_text())
    spec["model"].update(vocab_size=64, seq_len=16)
    spec["batch_tokens"] = 64
    spec["train"].update(data={"path": str(tiny_dataset), "val_tokens": 256}, checkpoint_every_s=None)
    spec["train"]["optim"]["ref_batch_tokens"] = 64
    (base / "sweep.yaml").write_text(yaml.safe_dump(spec))
    return base


@pytest.fixture
def tiny_price(tiny_base, tiny_dataset, tmp_path, monkeypatch):
    """``loopscale price ARGS`` against the tiny base (4 pairs: one look), its data the tiny dataset, the
    example plugin installed as the entry point ``loop-embedding`` (for the training processes too)."""
    monkeypatch.setattr(loopscale.data, "prepare_default", lambda *args, **kwargs: tiny_dataset)
    monkeypatch.setattr(loopscale.plugins, "installed_plugins", lambda: {PLUGIN.name: PLUGIN})
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(EXAMPLE), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "out"

    def run(*args: str) -> int:
        return main(["price", *args, "--reuse", str(tiny_base), "--out", str(out), "--max-hours", "0.1",
                     "--bootstrap", "2", "--data-root", str(tmp_path / "data")])  # fmt: skip

    return run, out


def _run_configs(out: Path) -> list[dict]:
    return [yaml.safe_load(path.read_text()) for path in sorted((out / "runs").glob("*/config.yaml"))]


def test_presets_are_the_sweep_group_changes_they_always_were():
    # the published price folders' sweep.yaml hold these groups: a resumed price must plan the same runs
    assert {name: resolve_recipe(name).changes() for name in PRESETS} == {
        "hyperconnections": {"model": {"injection": "hyperconnect"}},
        "truncated-bptt": {"bptt": "ceil_half"},
        "parcae": {"model": {"injection": "parcae"}},
        "parcae-diag": {"model": {"injection": "parcae-diag"}},
        "parcae-zero": {"model": {"injection": "parcae", "loop_init": "zero"}},
        "parcae-random": {"model": {"injection": "parcae", "loop_init": "random"}},
        "sampled-depth": {"train": {"depth_sampling": "poisson-lognormal"}},
        "curriculum": {"train": {"loop_curriculum": "linear:0.25"}},
    }


def test_set_variant_and_preset_compose_in_order(tmp_path):
    variant = tmp_path / "v.yaml"
    variant.write_text("model: {injection: parcae}\ntrain: {optim: {adam_betas: [0.9, 0.99]}}\nbptt: 2\n")
    recipe = resolve_recipe("curriculum", variant=variant, sets=["optim.matrix_lr=0.02"], label="mine")
    assert recipe == Recipe("mine", ("loop_curriculum=linear:0.25", "model.injection=parcae",
                                     "optim.adam_betas=[0.9, 0.99]", "bptt=2", "optim.matrix_lr=0.02"))
    assert recipe.changes() == {
        "train": {"loop_curriculum": "linear:0.25", "optim": {"adam_betas": [0.9, 0.99], "matrix_lr": 0.02}},
        "model": {"injection": "parcae"},
        "bptt": "2",
    }


@pytest.mark.parametrize(
    ("args", "variant", "match"),
    [
        (["--set", "model.injecton=parcae", "--name", "x"], None, "model.injecton: unknown key 'injecton'"),
        (["--set", "model.injection=foo", "--name", "x"], None, "model.injection=foo: model: injection must"),
        (["--set", "optim.matrix_lr=fast", "--name", "x"], None, "optim.matrix_lr=fast: .*expected a number"),
        (["--set", "optim.muon_momentum=1.5", "--name", "x"], None, "muon_momentum=1.5: .*in \\[0, 1\\)"),
        (["--set", "model.vocab_size=128", "--name", "x"], None, "model.vocab_size: .* must stay matched"),
        (["--set", "model.seq_len=64", "--name", "x"], None, "model.seq_len: .* must stay matched"),
        (["--set", "data.path=elsewhere", "--name", "x"], None, "data.path: .* must stay matched"),
        (["--set", "seed=3", "--name", "x"], None, "seed: .* must stay matched"),
        (["--set", "model.bptt_k=2", "--name", "x"], None, "model.bptt_k: .*bptt=ceil_half"),
        (["--set", "optim={recipe: adamw}", "--name", "x"], None, "optim is a section, not a key"),
        (["--set", "seed.x=1", "--name", "x"], None, "seed.x: seed is a value, not a section"),
        (["--set", "bptt=most", "--name", "x"], None, "bptt=most: .*bptt must be"),
        (["--set", "model.injection"], None, "expected KEY=VALUE"),
        (["parcae", "--set", "optim.matrix_lr=0.02"], None, "name it with --name"),
        (["parcae-full"], None, "unknown recipe 'parcae-full'"),
        (["--variant", "V", "--name", "x"], "groups: []\n", "unknown key.*'groups'; a variant sets model"),
        (["--variant", "V", "--name", "x"], "model: {hc_lanes: 0}\n", "model.hc_lanes=0: .*hc_lanes must be"),
        (["--plugin", "no_such_module:RECIPE"], None, "plugin no_such_module:RECIPE: cannot load it"),
    ],
)
def test_a_bad_recipe_is_one_line_naming_the_key(args, variant, match, tmp_path, capsys):
    if variant is not None:
        (tmp_path / "v.yaml").write_text(variant)
        args = [str(tmp_path / "v.yaml") if a == "V" else a for a in args]
    out = tmp_path / "out"
    assert main(["price", *args, "--reuse", str(PUBLISHED), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(match, err), err
    assert not out.exists()  # refused before anything is written


def test_price_runs_a_variant_file_with_set_on_top_and_resumes_only_that_recipe(tiny_price, tmp_path, capsys):
    run, out = tiny_price
    variant = tmp_path / "variant.yaml"
    variant.write_text("model:\n  injection: parcae-diag\n")
    assert run("--variant", str(variant), "--set", "optim.injection_lr=0.02", "--name", "diag-lr") == 0
    settings = json.loads((out / "price.json").read_text())["settings"]
    assert settings["recipe"] == "diag-lr"
    assert settings["overrides"] == ["model.injection=parcae-diag", "optim.injection_lr=0.02"]
    configs = _run_configs(out)
    assert len(configs) == 4
    assert all(c["model"]["injection"] == "parcae-diag" for c in configs)
    assert all(c["optim"]["injection_lr"] == 0.02 for c in configs)
    report = (out / "report.md").read_bytes()
    assert b"diag-lr" in report
    # a rerun into the same folder must be the same recipe: another is one line, and nothing changes
    capsys.readouterr()
    assert run("--set", "model.injection=parcae-diag", "--name", "diag-lr") == 2
    err = capsys.readouterr().err
    assert "prices recipe diag-lr (model.injection=parcae-diag optim.injection_lr=0.02)" in err
    assert main(["price", "--out", str(out), "--reuse", str(out), "--render"]) == 0
    assert (out / "report.md").read_bytes() == report


def test_price_prices_a_plugin_from_its_entry_point(tiny_price):
    run, out = tiny_price
    assert run("loop-embedding") == 0
    settings = json.loads((out / "price.json").read_text())["settings"]
    assert settings["recipe"] == "loop-embedding"
    assert settings["overrides"] == ["model.loop_hook=loopscale_loop_embedding:RECIPE"]
    configs = _run_configs(out)
    assert len(configs) == 4 and all(c["model"]["loop_hook"] == PLUGIN.value for c in configs)
    with open(out / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4
    for row in rows:  # the r·d loop vectors trained (they started at zero) and N counts them
        vectors = load_file(out / "runs" / row["run"] / "model.safetensors")["loop_hook.vectors"]
        width, r = int(row["width"]), int(row["r"])
        assert vectors.shape == (r, width) and vectors.abs().sum() > 0
        assert int(row["n_rec"]) == 8 // r * (12 * width**2 + 2 * width) + 2 * width**2 + r * width


LYING = """
import torch
from loopscale.plugins import RecipePlugin

class Square(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = torch.nn.Linear(d, d, bias=False)
        torch.nn.init.zeros_(self.w.weight)

    def forward(self, u, i):
        return u + self.w(u)

RECIPE = RecipePlugin(name="square", build_hook=lambda cfg: Square(cfg.width), params=lambda cfg: {params},
                      loop_flops=lambda cfg: 0, optim_group="matrix")
"""


@pytest.mark.parametrize(("params", "match"), [("0", "declares 0 parameters, the model has"),
                                               ("cfg.width ** 2", "training FLOPs per token, a forward")])
def test_a_plugin_whose_declared_counts_are_off_is_refused(
    params, match, tiny_base, tmp_path, monkeypatch, capsys
):  # fmt: skip
    module = f"lying_plugin_{len(params)}"  # a module per case: an imported one stays in sys.modules
    (tmp_path / f"{module}.py").write_text(LYING.format(params=params))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    assert main(["price", "--plugin", f"{module}:RECIPE", "--reuse", str(tiny_base), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err and "recipe square at width" in err, err
    assert not out.exists()


def test_a_plugin_is_a_recipe_plugin_with_a_declared_hook(tmp_path, monkeypatch):
    (tmp_path / "half_plugin.py").write_text(
        "from loopscale.plugins import RecipePlugin\nRECIPE = RecipePlugin(name='h', build_hook=print)\n"
        "OTHER = object()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError, match="must declare params"):
        resolve_recipe(None, plugin="half_plugin:RECIPE")
    with pytest.raises(UserError, match="expected a loopscale.plugins.RecipePlugin"):
        resolve_recipe(None, plugin="half_plugin:OTHER")


def test_a_published_price_folder_reads_as_its_preset():
    """Records written before presets were override lists (no ``overrides`` key, kept as fixtures) and the
    published ones, replayed since, both read as their preset."""
    before = ROOT / "tests" / "pairs" / "fixtures" / "before-49"
    for name in ("parcae", "sampled-depth", "curriculum"):
        old = json.loads((before / f"laptop-{name}" / "price.json").read_text())["settings"]
        assert "overrides" not in old and recorded_recipe(old) == resolve_recipe(name)
        settings = json.loads((ROOT / "results" / f"laptop-{name}" / "price.json").read_text())["settings"]
        assert recorded_recipe(settings) == resolve_recipe(name)
    assert recorded_recipe({"recipe": "mine", "overrides": ["bptt=2"]}) == Recipe("mine", ("bptt=2",))
