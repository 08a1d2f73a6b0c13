"""``loopscale compare`` refuses arms that are not comparable (``pairs.comparable``; issue 36 item 5): each of
the five kinds of incomparable pair, built from the published laptop sweeps with one thing changed, ends in
one line on stderr and exit 2 before any fitting; the published pairs (a recipe change of injection or of
the BPTT window) pass. Also the not-identified cases: a base at one budget, a fit with nothing free."""

from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path

import pytest
import yaml

from loopscale.analysis.comparable import check_setups
from loopscale.cli import main
from loopscale.errors import UserError
from loopscale.fit import load_table
from loopscale.pairs.comparable import check_tables

RESULTS = Path(__file__).resolve().parents[2] / "results"
BASE = RESULTS / "laptop-factorial"
CHEAP = ["--restarts", "20", "--bootstrap", "2", "--bootstrap-restarts", "0", "--no-law-check"]


def _cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _write_rows(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _arm(tmp: Path, name: str, source: Path, *, spec=None, rows=None, with_spec: bool = True) -> str:
    """A copy of a published sweep's table in tmp/name: ``spec(dict)`` edits its sweep.yaml, ``rows(list)``
    its rows; ``with_spec`` False leaves the sweep.yaml out (a plain CSV)."""
    folder = tmp / name
    folder.mkdir()
    table = _rows(source / "results.csv")
    if rows is not None:
        rows(table)
    _write_rows(folder / "results.csv", table)
    if with_spec:
        data = yaml.safe_load((source / "sweep.yaml").read_text())
        if spec is not None:
            spec(data)
        (folder / "sweep.yaml").write_text(yaml.safe_dump(data))
    return str(folder / "results.csv")


def _group(data: dict, name: str) -> dict:
    return next(g for g in data["groups"] if g["name"] == name)


def _set_r1_loss(rows: list[dict]) -> None:
    row = next(r for r in rows if r["run"] == "main_C5e12_d48_r1")
    row["loss"] = str(float(row["loss"]) + 0.01)


def _set_r1_size(rows: list[dict]) -> None:
    for row in rows:
        if row["r"] == "1" and row["width"] == "48":
            row["n_rec"] = str(int(row["n_rec"]) + 4608)  # one more layer of d = 48 (12 d² + norms)
            row["n"] = str(int(row["n"]) + 4608)


INCOMPARABLE = {
    "vocabulary": (dict(spec=lambda d: d["model"].update(vocab_size=2048)), "differ in vocab_size"),
    "context length": (dict(spec=lambda d: d["model"].update(seq_len=256)), "differ in seq_len"),
    "template": (
        dict(spec=lambda d: _group(d, "truncated-bptt").update(model={"depth": 12})),
        "differ in depth (base 10, variant 10 and 12",
    ),
    "data": (
        dict(spec=lambda d: d["train"]["data"].update(path="data/packed/other-bpe1024-T128")),
        "differ in data.path",
    ),
    "clashing anchor": (dict(rows=_set_r1_loss), "clashes with the base's main_C5e12_d48_r1"),
}


@pytest.mark.parametrize("case", sorted(INCOMPARABLE))
def test_incomparable_arms_are_refused_in_one_line(tmp_path, case):
    edit, words = INCOMPARABLE[case]
    base = _arm(tmp_path, "base", BASE)
    variant = _arm(tmp_path, "variant", RESULTS / "laptop-truncated-bptt", **edit)
    code, out, err = _cli(["compare", base, variant, *CHEAP])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err, err


def test_validation_tokens_and_a_groups_vocabulary_count_too(tmp_path):
    def spec(d):
        d["train"]["data"]["val_tokens"] = 65536
        _group(d, "hyperconnections")["model"]["vocab_size"] = 4096

    base, variant = tmp_path / "base", tmp_path / "variant"
    _arm(tmp_path, "base", BASE)
    _arm(tmp_path, "variant", RESULTS / "laptop-hyperconnections", spec=spec)
    tables = [load_table(folder / "results.csv") for folder in (BASE, RESULTS / "laptop-hyperconnections")]
    with pytest.raises(UserError, match=r"vocab_size \(base 1024, variant 1024 and 4096"):
        check_setups(base, variant, *tables)
    del_vocab = yaml.safe_load((variant / "sweep.yaml").read_text())
    _group(del_vocab, "hyperconnections")["model"].pop("vocab_size")
    (variant / "sweep.yaml").write_text(yaml.safe_dump(del_vocab))
    with pytest.raises(UserError, match=r"data.val_tokens \(base 131072, variant 65536;"):
        check_setups(base, variant, *tables)


@pytest.mark.parametrize("variant", ["laptop-truncated-bptt", "laptop-hyperconnections"])
def test_the_published_recipe_changes_are_comparable(variant):
    """Hyperconnections change ``injection`` (and N of the looped runs), truncated BPTT the BPTT window:
    the recipe itself, so nothing is refused and nothing needs a note."""
    base, other = load_table(BASE / "results.csv"), load_table(RESULTS / variant / "results.csv")
    assert check_setups(BASE, RESULTS / variant, base, other) == []
    check_tables(base, other)


def test_plain_tables_are_checked_by_their_columns_and_say_what_was_not(tmp_path):
    base = _arm(tmp_path, "base", BASE, with_spec=False)
    variant = _arm(tmp_path, "variant", RESULTS / "laptop-truncated-bptt", with_spec=False, rows=_set_r1_size)
    code, _, err = _cli(["compare", base, variant, *CHEAP])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "r = 1 runs of width d = 48 differ in size" in err
    notes = check_setups(tmp_path / "base", tmp_path / "variant", load_table(base), load_table(base))
    assert len(notes) == 1 and "could not be checked" in notes[0]
    assert "next to the base table and the variant table" in notes[0]


def test_a_base_at_one_budget_gives_no_verdict(tmp_path):
    def one_budget(rows):
        rows[:] = [r for r in rows if float(r["budget"]) == 5e12]

    base = _arm(tmp_path, "base", BASE, rows=one_budget)
    variant = _arm(tmp_path, "variant", RESULTS / "laptop-truncated-bptt")
    code, out, err = _cli(["compare", base, variant, *CHEAP])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "the base has runs at one budget only (C = 5e+12)" in err and "not identified" in err


@pytest.mark.parametrize(
    "flags",
    [
        ["--fix", "E=1.5,A=100,B=100,alpha=0.3,beta=0.3,phi=0.4"],
        ["--fix", "E=1.5,A=100,B=100", "--fix", "alpha=0.3,beta=0.3", "--fix-phi", "0.4"],
        ["--prior", "paper", "--fix", "A=100,B=100,phi=0.4"],
    ],
)
def test_a_fit_with_every_parameter_fixed_is_refused_in_one_line(flags):
    code, out, err = _cli(["fit", str(BASE / "results.csv"), *flags, "--bootstrap", "0", "--restarts", "5"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "nothing to fit: every parameter is fixed" in err


def _one_seed(loss_shift: float):
    """Rows edit: the seed-0 runs only, the base's r = 1 run main_C5e12_d48_r1 ``loss_shift`` nats higher, and
    (``seed`` False) no seed column."""

    def edit(rows: list[dict], seed: bool) -> None:
        rows[:] = [r for r in rows if r["seed"] == "0"]
        for r in rows:
            if r["run"] == "main_C5e12_d48_r1":
                r["loss"] = str(float(r["loss"]) + loss_shift)
            if not seed:
                r.pop("seed")

    return edit


@pytest.mark.parametrize("seed", [True, False])
def test_the_base_r1_run_with_another_loss_clashes_with_or_without_a_seed_column(tmp_path, seed):
    """Issue 49 (6): a variant listing the base's r = 1 run under its own name with a loss 0.05 higher is
    refused in one line whether or not the tables have a seed column (a missing seed is one seed); before,
    without it the table was accepted and read as Δφ −0.10."""
    base = _arm(tmp_path, "base", BASE, rows=lambda rows: _one_seed(0.0)(rows, seed))
    variant = _arm(
        tmp_path, "variant", RESULTS / "laptop-truncated-bptt", rows=lambda rows: _one_seed(0.05)(rows, seed)
    )
    assert ("seed" in _rows(Path(base).parent / "results.csv")[0]) == seed
    code, out, err = _cli(["compare", base, variant, *CHEAP])
    seen = "seed 0" if seed else "no seed column"
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert (
        f"the variant's r = 1 run main_C5e12_d48_r1 (C = 5e+12, d = 48, {seen}) clashes with the base's "
        "main_C5e12_d48_r1: loss" in err
    )


def test_compare_takes_sweep_folders_and_ends_with_prices_verdict_line(tmp_path):
    """Issue 50 (5): an arm is a table or a sweep folder (its results.csv, or, where it has none yet, its run
    folders read as collect reads them); the same arms either way give the same output, ending with the
    verdict line ``price`` prints (``present.price_text.verdict_line``)."""
    import shutil

    variant = RESULTS / "laptop-truncated-bptt"
    code, by_table, err = _cli(["compare", str(BASE / "results.csv"), str(variant / "results.csv"), *CHEAP])
    assert code == 0, err
    fresh = tmp_path / "laptop-truncated-bptt"  # a sweep folder not collected yet: sweep.yaml and runs/
    fresh.mkdir()
    shutil.copy(variant / "sweep.yaml", fresh / "sweep.yaml")
    shutil.copytree(variant / "runs", fresh / "runs")
    for arms in ([str(BASE), str(variant)], [str(BASE), str(fresh)]):
        code, out, err = _cli(["compare", *arms, *CHEAP])
        assert code == 0 and out == by_table, err
    last = by_table.strip().splitlines()[-1]
    assert last.startswith("laptop-truncated-bptt: ")
    assert "; 51 pairs, one look (compare: all pairs at once); tests at size 0.0400, intervals at 96" in last
    assert last.endswith("errors: cluster-robust over the pairs' 12 (r, width) clusters, t on 11 df")
    code, _, err = _cli(["compare", str(tmp_path), str(variant), *CHEAP])
    assert code == 2 and "neither results.csv nor sweep.yaml" in err and len(err.strip().splitlines()) == 1
