"""Issue 12: bad input to any command ends in exactly one line on stderr (no traceback), exit code 2, and
nothing half-written. One table of cases: (id, setup, expected fragment of the error line).

Each setup gets the test's folder and returns the argv; the folder is snapshotted after the setup and must
be unchanged after the command. Read-only folders are simulated where the tests run as root (root ignores
permission bits): ``os.access`` then reports the folder as not writable, as it does for a normal user.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from loopscale.cli import main
from loopscale.data.dataset import SplitWriter, finish_build, row_dtype, start_build

VOCAB, SEQ_LEN = 64, 16

SPEC = """
name: table
batch_tokens: 64
model: {{depth: 4, prelude: 1, coda: 1, head_dim: 16, vocab_size: 64, seq_len: 16}}
train:
  device: cpu
  progress: false
  data: {{path: {data}, val_tokens: 256}}
  optim: {{ref_width: 32, ref_batch_tokens: 64, ref_r_looped: 2}}
groups:
  - name: main
    rs: [1, 2]
    grid:
      - {{budget: 1e9, widths: [16]}}
"""

TABLE_HEADER = "run,status,reason,r,n_once,n_rec,tokens,loss,budget\n"
TABLE_OK = "".join(
    f"r{i},ok,,{r},{1000 * w},{500 * w},{1e6 * w},{3 + 1 / w:.4f},{1e12 * w}\n"
    for i, (r, w) in enumerate((r, w) for r in (1, 2, 4) for w in (1, 2, 3))
)


def build_dataset(folder: Path) -> Path:
    """A tiny packed dataset (vocab 64, T = 16) with two train shards."""
    out = start_build(folder)
    rng = np.random.default_rng(0)
    splits = {}
    for split, n_rows in (("train", 128), ("val", 16)):
        writer = SplitWriter(out, split, SEQ_LEN + 1, row_dtype(VOCAB), seed=0, rows_per_shard=64)
        for _ in range(n_rows):
            row = rng.integers(1, VOCAB, SEQ_LEN + 1)
            row[0] = 0
            writer.add(row)
        splits[split] = writer.close()
    meta = {"vocab_size": VOCAB, "bos_id": 0, "seq_len": SEQ_LEN, "row_len": SEQ_LEN + 1}
    return finish_build(out, {**meta, "dtype": row_dtype(VOCAB).name, "splits": splits})


def afile(tmp: Path) -> Path:
    path = tmp / "afile"
    path.write_text("not a folder\n")
    return path


def read_only(tmp: Path, name: str, monkeypatch) -> Path:
    folder = tmp / name
    folder.mkdir(exist_ok=True)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    if os.geteuid() == 0:
        real_access = os.access
        monkeypatch.setattr(
            os, "access", lambda p, mode, **kw: False if Path(p) == folder else real_access(p, mode, **kw)
        )
    return folder


def table(tmp: Path, rows: str) -> Path:
    path = tmp / "results.csv"
    path.write_text(TABLE_HEADER + rows)
    return path


def sweep_folder(tmp: Path, damage: str | None = None) -> Path:
    """A finished synthetic sweep folder (no training); ``damage`` spoils one run's result.json."""
    from sweep.helpers import synthetic_sweep

    root = tmp / "sw"
    runs = synthetic_sweep(root)
    result = root / "runs" / runs[0].name / "result.json"
    if damage == "bytes":
        result.write_bytes(bytes(range(256)) * 4)
    elif damage == "loss":
        doc = json.loads(result.read_text())
        result.write_text(json.dumps({**doc, "val_loss": "low"}))
    return root


def sweep_with_read_only_run(tmp: Path, monkeypatch) -> Path:
    root = sweep_folder(tmp)
    read_only(root / "runs", sorted(p.name for p in (root / "runs").iterdir())[0], monkeypatch)
    return root


def spec_file(tmp: Path) -> Path:
    data = build_dataset(tmp / "data")
    path = tmp / "spec.yaml"
    path.write_text(SPEC.format(data=data))
    return path


def text_folder(tmp: Path) -> Path:
    folder = tmp / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("The river ran past a stone house. " * 200)
    return folder


def truncated_dataset(tmp: Path) -> Path:
    data = build_dataset(tmp / "data")
    shard = sorted((data / "train").glob("*.npy"))[-1]
    shard.write_bytes(shard.read_bytes()[:300])
    return data


def parquet_with_negative_id(tmp: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp / "rows.parquet"
    pq.write_table(pa.table({"tokens": [[0, 5, 7, 9], [0, -3, 2, 1]]}), path)
    return path


TRAIN_FLAGS = [
    "--width",
    "16",
    "--depth",
    "4",
    "--prelude",
    "1",
    "--coda",
    "1",
    "--r",
    "2",
    "--head-dim",
    "16",
]

CASES = [
    # 1. --resume of a folder that holds no run
    (
        "train-resume-empty",
        lambda t, m: ["train", "--out", str(t / "empty"), "--resume"],
        "holds no run to resume",
    ),
    (
        "train-resume-empty-dir",
        lambda t, m: (t / "e").mkdir() or ["train", "--out", str(t / "e"), "--resume"],
        "holds no run to resume",
    ),
    (
        "train-resume-with-config-but-no-run",
        lambda t, m: ["train", "--config", str(t / "run.yaml"), "--out", str(t / "new"), "--resume"],
        "holds no run to resume",
    ),
    # 3. output paths checked before the work
    ("fit-json-dir", lambda t, m: ["fit", str(table(t, TABLE_OK)), "--json", str(t)], "is a folder"),
    (
        "fit-json-under-file",
        lambda t, m: ["fit", str(table(t, TABLE_OK)), "--json", str(afile(t) / "x.json")],
        "is a file, not a folder",
    ),
    (
        "fit-plots-file",
        lambda t, m: ["fit", str(table(t, TABLE_OK)), "--plots", str(afile(t))],
        "not a folder",
    ),
    (
        "fit-json-read-only",
        lambda t, m: ["fit", str(table(t, TABLE_OK)), "--json", str(read_only(t, "ro", m) / "f.json")],
        "cannot write into",
    ),
    ("compare-json-dir", lambda t, m: ["compare", "a.csv", "b.csv", "--json", str(t)], "is a folder"),
    # inputs are checked before outputs: the checkpoint exists, so the --json folder is what is refused
    (
        "eval-json-dir",
        lambda t, m: (t / "ckpt").mkdir() or ["eval", str(t / "ckpt"), "--json", str(t)],
        "is a folder; give a file path",
    ),
    (
        "train-out-under-file",
        lambda t, m: ["train", "--out", str(afile(t) / "run")],
        "is a file, not a folder",
    ),
    (
        "train-out-read-only",
        lambda t, m: ["train", "--out", str(read_only(t, "ro", m) / "run"), "--steps", "2"],
        "cannot write into",
    ),
    (
        "data-prepare-root-under-file",
        lambda t, m: ["data", "prepare", "--root", str(afile(t) / "x")],
        "is a file",
    ),
    (
        "collect-out-under-file",
        lambda t, m: ["collect", str(t / "sw"), "--out", str(afile(t) / "c")],
        "is a file",
    ),
    (
        "collect-read-only",
        lambda t, m: ["collect", str(t / "sw"), "--out", str(read_only(t, "ro", m))],
        "cannot write into",
    ),
    (
        "report-out-under-file",
        lambda t, m: ["report", str(t / "sw"), "--out", str(afile(t) / "rep")],
        "is a file",
    ),
    (
        "report-read-only",
        lambda t, m: ["report", str(t / "sw"), "--out", str(read_only(t, "ro", m))],
        "cannot write into",
    ),
    (
        "sweep-read-only",
        lambda t, m: ["sweep", str(spec_file(t)), "--out", str(read_only(t, "ro", m))],
        "cannot write into",
    ),
    (
        "sweep-resume-read-only-run-folder",
        lambda t, m: ["sweep", "--out", str(sweep_with_read_only_run(t, m))],
        "cannot write into",
    ),
    # 3. bad values
    (
        "fit-zero-budget",
        lambda t, m: ["fit", str(table(t, TABLE_OK.replace(",1000000000000.0\n", ",0\n", 1)))],
        "invalid budget = 0",
    ),
    (
        "fit-negative-budget",
        lambda t, m: ["fit", str(table(t, TABLE_OK.replace(",1000000000000.0\n", ",-1e12\n", 1)))],
        "invalid budget = -1e+12",
    ),
    ("data-info-show-negative", lambda t, m: ["data", "info", str(t), "--show", "-1"], "--show must be >= 0"),
    ("describe-width-nan", lambda t, m: ["describe", "--width", "nan"], "invalid int value: 'nan'"),
    ("collect-random-bytes", lambda t, m: ["collect", str(sweep_folder(t, "bytes"))], "not a text file"),
    ("sweep-random-bytes", lambda t, m: ["sweep", "--out", str(sweep_folder(t, "bytes"))], "not a text file"),
    (
        "sweep-text-loss",
        lambda t, m: ["sweep", "--out", str(sweep_folder(t, "loss"))],
        "val_loss must be a number",
    ),
    # 5. validated before anything is written
    (
        "train-truncated-shard",
        lambda t, m: [
            "train",
            "--data",
            str(truncated_dataset(t)),
            "--out",
            str(t / "run"),
            "--steps",
            "2",
            "--batch-tokens",
            "64",
            "--device",
            "cpu",
            *TRAIN_FLAGS,
        ],
        "rebuild the dataset",
    ),
    (
        "sweep-workers-0",
        lambda t, m: ["sweep", str(spec_file(t)), "--out", str(t / "sw0"), "--workers", "0"],
        "--workers must be >= 1",
    ),
    (
        "sweep-threads-0",
        lambda t, m: ["sweep", str(spec_file(t)), "--out", str(t / "sw0"), "--threads", "0"],
        "--threads must be >= 1",
    ),
    (
        "prepare-seq-len",
        lambda t, m: [
            "data",
            "prepare",
            "--from",
            str(text_folder(t)),
            "--root",
            str(t / "d"),
            "--seq-len",
            "-1",
            "--vocab",
            "300",
        ],
        "seq_len must be >= 1",
    ),
    (
        "prepare-val-fraction",
        lambda t, m: [
            "data",
            "prepare",
            "--from",
            str(text_folder(t)),
            "--root",
            str(t / "d"),
            "--val-fraction",
            "1.5",
            "--vocab",
            "300",
        ],
        "between 0 and 1",
    ),
    (
        "prepare-garbage-tokenizer",
        lambda t, m: [
            "data",
            "prepare",
            "--from",
            str(text_folder(t)),
            "--root",
            str(t / "d"),
            "--tokenizer",
            str(afile(t)),
        ],
        "tokenizer",
    ),
    # 9. smaller
    (
        "import-parquet-negative-id",
        lambda t, m: [
            "data",
            "import-parquet",
            "--train",
            str(parquet_with_negative_id(t)),
            "--val",
            str(t / "rows.parquet"),
            "--out",
            str(t / "ds"),
            "--vocab",
            "64",
        ],
        "token id -3",
    ),
    (
        "train-config-is-dir",
        lambda t, m: ["train", "--config", str(t), "--out", str(t / "run")],
        "is a folder, not a YAML file",
    ),
    (
        "fit-all-failed",
        lambda t, m: ["fit", str(table(t, "a,failed,x,1,10,5,100,,1e9\n"))],
        "skipped 1 run(s)",
    ),
]


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize("setup, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(setup, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    argv = setup(work, monkeypatch)
    capsys.readouterr()
    before = snapshot(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    captured = capsys.readouterr()
    err = captured.err
    assert code == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and "Traceback" not in captured.out
    assert err.startswith("loopscale"), err
    assert expected in err, err
    assert snapshot(tmp_path) == before  # nothing written, nothing left behind


def test_version(capsys):
    from loopscale import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"loopscale {__version__}\n"
