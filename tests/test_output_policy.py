"""Issue 20: loopscale never deletes or overwrites what it did not create.

One output-path policy (``loopscale.io.check_output`` / ``claim_folder``) serves every command that writes
a folder: the file system root, the home folder and non-empty folders without loopscale's marker are
refused (one line, exit 2, nothing touched); marked folders are cleared only after the input validated;
names never leave their root; folders written by earlier versions (no marker) are recognised by their
files and still resume. Plus the bad inputs of the issue that used to crash or slip through.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from loopscale.cli import main
from loopscale.errors import UserError
from loopscale.io import MARKER, check_output, claim_folder, folder_kind, shown

REPO = Path(__file__).resolve().parents[1]


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (None for folders)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


def run(argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr) of ``loopscale ARGV``; stderr must be one line when the code is 2."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    err = capsys.readouterr().err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("loopscale") and "Traceback" not in err, err
    return code, err


def parquet(path: Path, rows: list[list]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"tokens": rows}), path)
    return path


def rows(seed: int, n: int = 6, width: int = 9, vocab: int = 64) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, (n, width)).tolist()


def import_parquet(out: Path, train: Path, val: Path, *extra) -> list:
    return ["data", "import-parquet", "--train", train, "--val", val, "--out", out, "--vocab", "64", *extra]


# ------------------------------------------------------------------------------------ refused output folders


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--out", "/", "--resume"],
        ["sweep", "--out", "/"],
        ["collect", "{tmp}/missing", "--out", "/"],
        ["data", "prepare", "--root", "/", "--no-fetch"],
    ],
    ids=["train", "sweep", "collect", "data-prepare"],
)
def test_the_file_system_root_is_refused_even_for_root(argv, tmp_path, capsys):
    code, err = run([a.format(tmp=tmp_path) for a in argv], capsys)
    assert code == 2 and "is the file system root; give a new or empty folder" in err


def test_a_file_output_is_never_written_into_the_root():
    with pytest.raises(UserError, match="writes into the file system root"):
        check_output("/fit.json", "--json", folder=False)


def test_the_home_folder_is_refused(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("export A=1\n")
    monkeypatch.setenv("HOME", str(home))
    train, val = parquet(tmp_path / "t.parquet", rows(0)), parquet(tmp_path / "v.parquet", rows(1))
    before = snapshot(home)
    code, err = run(import_parquet(home, train, val), capsys)
    assert code == 2 and "is your home folder" in err
    assert snapshot(home) == before
    # an empty home folder too: it is never an output folder
    (home / ".bashrc").unlink()
    code, err = run(["train", "--out", home, "--resume"], capsys)
    assert code == 2 and "is your home folder" in err


def users_dataset_like_folder(tmp_path: Path) -> Path:
    """A folder of the user's that happens to hold the file names of a dataset build."""
    folder = tmp_path / "mine"
    for split in ("train", "val"):
        (folder / split).mkdir(parents=True)
        (folder / split / "notes.txt").write_text(f"my {split} notes\n")
    (folder / "meta.json").write_text('{"owner": "me"}\n')
    (folder / "tokenizer.json").write_text('{"mine": true}\n')
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "weights.bin").write_bytes(bytes(range(256)))
    return folder


@pytest.mark.parametrize(
    "command",
    [
        lambda out, t, v: import_parquet(out, t, v),
        lambda out, t, v: ["data", "pack", "--corpus", out.parent / "c", "--tokenizer", out.parent / "k",
                           "--out", out],
        lambda out, t, v: ["data", "corpus", "--from", out.parent, "--out", out],
        lambda out, t, v: ["data", "prepare", "--root", out, "--from", out.parent],
        lambda out, t, v: ["train", "--out", out, "--steps", "2"],
        lambda out, t, v: ["sweep", "--preset", "demo", "--out", out],
        lambda out, t, v: ["lr-sweep", "--preset", "demo", "--out", out, "--budget", "1e9", "--widths", "16"],
        lambda out, t, v: ["collect", out.parent / "sw", "--out", out],
        lambda out, t, v: ["report", out.parent / "sw", "--out", out],
        lambda out, t, v: ["fit", out.parent / "table.csv", "--plots", out],
        lambda out, t, v: ["demo", "--out", out],
        lambda out, t, v: ["demo", "--data-root", out],
    ],
    ids=["import-parquet", "pack", "corpus", "prepare", "train", "sweep", "lr-sweep", "collect", "report",
         "fit-plots", "demo-out", "demo-data-root"],
)
def test_a_non_empty_folder_loopscale_did_not_create_is_refused_and_untouched(
    command, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # demo's default folders are relative
    from loopscale.data.corpus import Document, write_corpus

    folder = users_dataset_like_folder(tmp_path)
    train, val = parquet(tmp_path / "t.parquet", rows(0)), parquet(tmp_path / "v.parquet", rows(1))
    write_corpus([Document("a", "text", "some text")], tmp_path / "c")  # inputs of `data pack`
    (tmp_path / "k").write_text("{}")
    before = snapshot(tmp_path)
    code, err = run(command(folder, train, val), capsys)
    assert code == 2 and "not empty and was not created by loopscale" in err
    assert "give a new or empty folder" in err
    assert snapshot(tmp_path) == before  # byte-identical, and nothing added


def test_train_keeps_the_checkpoints_of_a_folder_it_did_not_create(tmp_path, capsys):
    folder = tmp_path / "old"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "latest").write_text("step_00000001\n")
    before = snapshot(folder)
    code, err = run(["train", "--out", folder, "--steps", "2", "--device", "cpu"], capsys)
    assert code == 2 and "not created by loopscale" in err
    assert snapshot(folder) == before
    # the library entry point refuses it as well, before anything is written
    with pytest.raises(UserError, match="not created by loopscale"):
        claim_folder(folder, "run")
    assert snapshot(folder) == before


def test_a_loopscale_folder_of_another_kind_is_refused(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    text = tmp_path / "texts"
    text.mkdir()
    (text / "a.txt").write_text("The river ran past a stone house. " * 50)
    assert run(["data", "corpus", "--from", text, "--out", corpus], capsys)[0] == 0
    assert folder_kind(corpus) == "corpus"
    before = snapshot(corpus)
    train, val = parquet(tmp_path / "t.parquet", rows(0)), parquet(tmp_path / "v.parquet", rows(1))
    code, err = run(import_parquet(corpus, train, val), capsys)
    assert code == 2 and "holds a loopscale corpus folder, not a dataset folder" in err
    assert snapshot(corpus) == before


# ------------------------------------------------------------------------------ marked folders and the marker


def test_a_marked_dataset_is_replaced_only_once_the_new_input_validated(tmp_path, capsys):
    out = tmp_path / "ds"
    first = (parquet(tmp_path / "t1.parquet", rows(0)), parquet(tmp_path / "v1.parquet", rows(1)))
    assert run(import_parquet(out, *first), capsys)[0] == 0
    marker = json.loads((out / MARKER).read_text())
    assert marker["kind"] == "dataset" and marker["loopscale"]
    built = snapshot(out)

    # a bad parquet: one fractional id in the val split, read after the whole train split was written
    fractional = parquet(tmp_path / "bad.parquet", [[0.0, 1.0, 2.0], [3.0, 1.5, 4.0]])
    missing = tmp_path / "none.parquet"
    for bad in (import_parquet(out, first[0], fractional), import_parquet(out, missing, fractional)):
        code, err = run(bad, capsys)
        assert code == 2
        assert snapshot(out) == built  # the earlier dataset, byte for byte; no staging folder left

    second = (parquet(tmp_path / "t2.parquet", rows(2, n=4)), parquet(tmp_path / "v2.parquet", rows(3, n=3)))
    assert run(import_parquet(out, *second), capsys)[0] == 0
    from loopscale.data import PackedDataset

    ds = PackedDataset(out)
    assert ds.num_rows("train") == 4 and ds.num_rows("val") == 3
    np.testing.assert_array_equal(ds.rows("val", 0, 3), np.array(rows(3, n=3)))
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, "meta.json", "train", "val"])


def test_fractional_token_ids_are_refused_not_truncated(tmp_path, capsys):
    out = tmp_path / "ds"
    fractional = parquet(tmp_path / "f.parquet", [[0.0, 1.0, 2.0], [3.0, 1.5, 4.0]])
    code, err = run(import_parquet(out, fractional, fractional), capsys)
    assert code == 2 and "token id 1.5" in err and "not a whole number" in err
    assert not out.exists()
    # whole-number floats are token ids
    whole = parquet(tmp_path / "w.parquet", [[0.0, 1.0, 2.0], [3.0, 5.0, 4.0]])
    assert run(import_parquet(out, whole, whole), capsys)[0] == 0


def test_names_never_leave_their_root(tmp_path, capsys):
    text = tmp_path / "texts"
    text.mkdir()
    (text / "a.txt").write_text("The river ran past a stone house. " * 200)
    root = tmp_path / "a" / "b"
    before = snapshot(tmp_path)
    for name in ("../../x", "..", "x/../../y", "/abs"):
        code, err = run(["data", "prepare", "--from", text, "--root", root, "--name", name, "--vocab", "300"],
                        capsys)
        assert code == 2 and "must be a folder name" in err, err
    # a symlink out of the root is refused too
    (root / "corpus").mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere", root / "corpus" / "link")
    code, err = run(["data", "prepare", "--from", text, "--root", root, "--name", "link", "--vocab", "300"],
                    capsys)
    assert code == 2 and "leads outside" in err
    assert not (tmp_path / "x").exists() and not (tmp_path / "elsewhere").exists()
    (root / "corpus" / "link").unlink()
    (root / "corpus").rmdir()
    assert {k for k in snapshot(tmp_path)} == set(before) | {"a", "a/b"}


def test_claiming_writes_the_marker_once_and_a_failed_command_leaves_nothing(tmp_path, capsys):
    folder = claim_folder(tmp_path / "new" / "run", "run")
    first = (folder / MARKER).read_text()
    assert json.loads(first)["kind"] == "run"
    claim_folder(folder, "run")
    assert (folder / MARKER).read_text() == first
    assert [p.name for p in folder.iterdir()] == [MARKER]  # written atomically: no temporary file left
    # a collect into a new folder that fails on its input removes the folder it claimed
    code, _ = run(["collect", tmp_path / "nosweep", "--out", tmp_path / "table"], capsys)
    assert code == 2 and not (tmp_path / "table").exists()


# ------------------------------------------------------------------- folders of earlier loopscale versions


def test_committed_folders_of_earlier_versions_are_recognised_without_writing():
    for sweep in ("laptop", "cpu", "laptop-lr"):
        folder = REPO / "results" / sweep
        assert folder_kind(folder) == "sweep"
        before = sorted(p.name for p in folder.iterdir())
        check_output(folder, "--out", folder=True, kind="sweep")
        check_output(folder, "--out", folder=True, kind="report")  # report --out SWEEP_DIR
        assert sorted(p.name for p in folder.iterdir()) == before  # the check itself writes nothing
    run_folder = next((REPO / "results" / "laptop" / "runs").iterdir())
    assert folder_kind(run_folder) == "run"


def test_a_legacy_sweep_resumes_and_is_marked(tmp_path, capsys):
    from sweep.helpers import synthetic_sweep

    root = tmp_path / "sw"
    synthetic_sweep(root)
    assert not (root / MARKER).exists()
    code, err = run(["collect", root], capsys)
    assert code == 0, err
    assert json.loads((root / MARKER).read_text())["kind"] == "sweep"
    # a run folder of an earlier version (config.yaml, checkpoints, no marker) passes train --resume's check
    committed = next((REPO / "results" / "laptop" / "runs").iterdir())
    run_folder = next((root / "runs").iterdir())
    (run_folder / "config.yaml").write_text((committed / "config.yaml").read_text())
    (run_folder / "checkpoints").mkdir()
    assert folder_kind(run_folder) == "run"
    check_output(run_folder, "--out", folder=True, kind="run", deep=True)


def test_a_legacy_dataset_is_rebuilt_in_place(tmp_path, capsys):
    out = tmp_path / "ds"
    pair = (parquet(tmp_path / "t.parquet", rows(0)), parquet(tmp_path / "v.parquet", rows(1)))
    assert run(import_parquet(out, *pair), capsys)[0] == 0
    (out / MARKER).unlink()  # as an earlier version left it
    assert folder_kind(out) == "dataset"
    assert run(import_parquet(out, *pair), capsys)[0] == 0
    assert folder_kind(out) == "dataset" and (out / MARKER).is_file()


def test_an_unreadable_marker_is_not_trusted(tmp_path):
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / MARKER).write_text("my own notes\n")
    with pytest.raises(UserError, match="not a loopscale folder marker"):
        check_output(folder, "--out", folder=True, kind="dataset")


# ------------------------------------------------------------------------------------------- bad sweep input


SPEC = """\
name: policy
batch_tokens: 64
model: {depth: 4, prelude: 1, coda: 1, head_dim: 16, vocab_size: 64, seq_len: 16}
train: {device: cpu, data: {path: nowhere}, optim: {ref_width: 32, ref_batch_tokens: 64}}
groups:
  - name: GROUP
    rs: [1, 2]
    grid:
      - {budget: 1e9, widths: [16]}
"""


@pytest.mark.parametrize("budget", ["nan", "inf", "-inf"])
def test_lr_sweep_refuses_non_finite_budgets(budget, tmp_path, capsys):
    out = tmp_path / "lr"
    argv = ["lr-sweep", "--preset", "demo", "--out", out, f"--budget={budget}", "--widths", "16"]
    code, err = run(argv, capsys)
    assert code == 2 and "budget must be a positive finite number of FLOPs" in err
    assert not out.exists()


def test_a_budget_is_checked_in_one_place_for_every_group():
    from loopscale.sweep.spec import BudgetWidths, RunGroup

    group = RunGroup(name="g", rs=[1], grid=[BudgetWidths(budget=math.inf, widths=[16])])
    with pytest.raises(UserError, match="positive finite number"):
        group.validate()


@pytest.mark.parametrize(
    "name, message",
    [
        ('"main\\n"', "group name 'main\\n' must be 1-100"),  # $ used to match before the newline
        ("g" * 300, "must be 1-100 letters"),
    ],
    ids=["trailing-newline", "300-characters"],
)
def test_bad_group_names_are_refused_before_anything_is_written(name, message, tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("GROUP", name))
    out = tmp_path / "sw"
    code, err = run(["sweep", spec, "--out", out], capsys)
    assert code == 2 and message in err, err
    assert len(err) < 600  # the 300-character name is shown cut
    assert not out.exists()  # no sweep.yaml left behind


def test_plan_refuses_unknown_train_keys_as_sweep_does(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("GROUP", "main").replace("device: cpu,", "device: cpu, colour: blue,"))
    plan_code, plan_err = run(["plan", spec, "--no-probe"], capsys)
    sweep_code, sweep_err = run(["sweep", spec, "--out", tmp_path / "sw"], capsys)
    assert plan_code == sweep_code == 2
    assert "unknown key(s) 'colour'" in plan_err
    assert plan_err.split("error: ")[1] == sweep_err.split("error: ")[1]
    assert not (tmp_path / "sw").exists()


def test_a_huge_argument_is_shown_cut_in_its_error_line(capsys):
    code, err = run(["design", "--preset", "laptop", "--prior", "p" * 100_000, "--no-probe"], capsys)
    assert code == 2 and len(err) < 1000 and "…" in err
    assert shown("x" * 500) == "x" * 199 + "…" and shown("short") == "short"
