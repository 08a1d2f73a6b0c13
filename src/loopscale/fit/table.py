"""The results table the fitter reads: one row per training run (CSV, JSONL, parquet, or in-memory).

Required columns: ``r``, ``n_once``, ``n_rec``, ``tokens``, ``loss`` (final validation loss in nats); or, for
non-looped data, ``params``, ``tokens``, ``loss`` (taken as r = 1, N_once = params, N_rec = 0). Optional:
``budget`` (training FLOPs; with r it defines the bootstrap cells), ``width``, ``seed`` (pairs a variant's run
with the base's in ``loopscale compare``), ``bptt_k`` (loops trained with gradients; the FLOPs model of a
truncated-BPTT arm), ``run``, ``status`` (rows whose
status is not "ok" are skipped with a warning and listed in ``RunTable.skipped``). Other columns (the
``loopscale collect`` schema has many) are ignored. A usable row with a missing, non-finite or non-positive
size, token count or loss is bad input: a one-line ``UserError`` naming the row. ``n_once = 0`` is allowed
(every parameter counted as recurrent; N_eff = r^φ·N_rec is still positive), as long as N_once + N_rec > 0.
The same run twice (same ``run`` name, r, n_once, n_rec and tokens; without a ``run`` column, the same r,
n_once, n_rec, tokens and loss) is refused: it would count one run double in the fit and its bootstrap.
Several seeds of one cell are different runs (different names, or different losses).
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from loopscale.accounting import ls_split
from loopscale.config import ModelConfig
from loopscale.config import replace as replace_config
from loopscale.errors import UserError
from loopscale.paper import paper_template


class SkippedRunsWarning(UserWarning):
    """Rows of a results table that were left out of the fit (failed runs)."""


@dataclass(frozen=True)
class RunTable:
    """Usable runs as NumPy columns. Sizes are parameter counts, tokens are counts, loss is in nats."""

    run: np.ndarray  # str labels
    r: np.ndarray  # int loop count
    n_once: np.ndarray
    n_rec: np.ndarray
    tokens: np.ndarray
    loss: np.ndarray
    budget: np.ndarray  # training FLOPs; NaN where the table has none
    width: np.ndarray  # d_model; NaN where the table has none
    seed: np.ndarray = None  # training seed; NaN where the table has none
    bptt_k: np.ndarray = None  # loops backpropagated through (k = r: full BPTT); NaN where the table has none
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("seed", "bptt_k"):  # optional columns: NaN when a caller builds a table without them
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.full(len(self.loss), math.nan))

    def __len__(self) -> int:
        return len(self.loss)

    @property
    def n(self) -> np.ndarray:
        """Unique non-embedding parameters N = N_once + N_rec."""
        return self.n_once + self.n_rec

    @property
    def has_budget(self) -> bool:
        return bool(np.all(np.isfinite(self.budget)))

    def subset(self, mask: np.ndarray) -> RunTable:
        """Rows where ``mask`` is true (or the given row indices)."""
        cols = {name: getattr(self, name)[mask] for name in _COLUMNS}
        return RunTable(**cols, skipped=list(self.skipped))

    def budget_halves(self) -> dict[str, np.ndarray]:
        """Masks of the lower and upper halves of the sorted budgets ({"low", "high"}; an odd middle budget
        goes to "high"); empty without budgets."""
        if not self.has_budget:
            return {}
        budgets = sorted(set(self.budget.tolist()))
        cut = budgets[len(budgets) // 2]
        return {"low": self.budget < cut, "high": self.budget >= cut}

    def cells(self) -> tuple[np.ndarray, list[tuple[float, int]]]:
        """Bootstrap blocks: (cell index per row, cell keys (budget, r)); without budgets each run is one."""
        if not self.has_budget:
            return np.arange(len(self)), [(math.nan, int(r)) for r in self.r]
        keys = sorted({(float(b), int(r)) for b, r in zip(self.budget, self.r)})
        index = {k: i for i, k in enumerate(keys)}
        return np.array([index[(float(b), int(r))] for b, r in zip(self.budget, self.r)]), keys

    def with_ls_split(self, template: ModelConfig | None = None) -> RunTable:
        """The same runs with (N_once, N_rec) set by the project page's least-squares split (method §3.4).

        Needs the ``width`` column; ``template`` carries depth, prelude/coda, vocabulary and context (paper
        defaults). For r = 1 the two LS parts do not sum exactly to N, as in the published fit.
        """
        if not np.all(np.isfinite(self.width)):
            raise UserError("the LS split needs a 'width' column (d_model) for every run")
        template = template or paper_template()
        n_once, n_rec = np.empty(len(self)), np.empty(len(self))
        for i, (w, r) in enumerate(zip(self.width, self.r)):
            n_once[i], n_rec[i] = ls_split(replace_config(template, width=int(w), r=int(r)))
        return replace(self, n_once=n_once, n_rec=n_rec)


_COLUMNS = ("run", "r", "n_once", "n_rec", "tokens", "loss", "budget", "width", "seed", "bptt_k")


def load_table(source: str | Path | list[dict] | dict[str, Any]) -> RunTable:
    """Read a results table from a CSV/JSONL/parquet path, a list of row dicts or a dict of columns."""
    if isinstance(source, str | Path):
        rows = _read_rows(Path(source))
        where = str(source)
    elif isinstance(source, dict):
        cols = {k: list(np.asarray(v).tolist()) for k, v in source.items()}
        lengths = {len(v) for v in cols.values()}
        if len(lengths) > 1:
            raise UserError(f"columns have different lengths: {sorted(lengths)}")
        rows = [dict(zip(cols, vals)) for vals in zip(*cols.values())]
        where = "table"
    elif isinstance(source, list):
        rows = source
        where = "table"
    else:
        raise UserError(f"cannot read a results table from {type(source).__name__}")
    return _build(rows, where)


def _read_rows(path: Path) -> list[dict]:
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a results table file (.csv, .jsonl or .parquet)")
    if not path.is_file():
        raise UserError(f"results table not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(newline="") as fh:
            return list(csv.DictReader(fh))
    if suffix in (".jsonl", ".ndjson"):
        rows = []
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path}:{i}: not valid JSON ({exc.msg})") from None
        return rows
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise UserError(f"{path}: cannot read parquet ({exc})") from None
    raise UserError(f"{path}: unknown table format {suffix!r}; use .csv, .jsonl or .parquet")


def _number(value: Any) -> float:
    if value is None or value == "":
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _build(rows: list[dict], where: str) -> RunTable:
    if not rows:
        raise UserError(f"{where}: the results table has no rows")
    columns = set().union(*(r.keys() for r in rows))
    looped = {"r", "n_once", "n_rec"} <= columns
    if not looped and "params" not in columns:
        missing = sorted({"r", "n_once", "n_rec"} - columns)
        raise UserError(f"{where}: missing column(s) {', '.join(missing)} (or 'params' for non-looped runs)")
    missing = sorted({"tokens", "loss"} - columns)
    if missing:
        raise UserError(f"{where}: missing column(s) {', '.join(missing)}")
    out: dict[str, list] = {name: [] for name in _COLUMNS}
    skipped: list[tuple[str, str]] = []
    seen: dict[tuple, list[int]] = {}  # identity of a run → its row numbers (1-based)
    for i, row in enumerate(rows):
        label = str(row.get("run") or f"row {i + 1}")
        status = str(row.get("status") or "ok").strip().lower()
        if status != "ok":
            skipped.append((label, f"status {status}: {row.get('reason') or 'no reason given'}"))
            continue
        if looped:
            r, n_once, n_rec = _number(row["r"]), _number(row["n_once"]), _number(row["n_rec"])
        else:
            r, n_once, n_rec = 1.0, _number(row["params"]), 0.0
        tokens, loss = _number(row["tokens"]), _number(row["loss"])
        for name, value, ok in (
            ("r", r, r >= 1 and float(r).is_integer()),
            ("n_once" if looped else "params", n_once, n_once >= 0 if looped else n_once > 0),
            ("n_rec", n_rec, n_rec >= 0 and (n_rec > 0 or r == 1) and n_once + n_rec > 0),
            ("tokens", tokens, tokens > 0),
            ("loss", loss, loss > 0),
        ):
            if not (math.isfinite(value) and ok):
                raise UserError(
                    f"{where}: run {label!r} has invalid {name} = {row.get(name, value)!r} "
                    f"(tokens and loss must be finite and positive, n_once and n_rec >= 0 with a positive "
                    f"sum, n_rec > 0 when r > 1; r a whole number >= 1)"
                )
        name = row.get("run")
        name = None if name is None or str(name).strip() == "" else str(name)
        key = (name, r, n_once, n_rec, tokens) if name is not None else (r, n_once, n_rec, tokens, loss)
        seen.setdefault(key, []).append(i + 1)
        out["run"].append(label)
        out["r"].append(int(r))
        out["n_once"].append(n_once)
        out["n_rec"].append(n_rec)
        out["tokens"].append(tokens)
        out["loss"].append(loss)
        out["budget"].append(_number(row.get("budget")))
        out["width"].append(_number(row.get("width")))
        out["seed"].append(_number(row.get("seed")))
        out["bptt_k"].append(_number(row.get("bptt_k")))
    _refuse_duplicates(seen, where)
    if skipped:
        warnings.warn(
            f"{where}: skipped {len(skipped)} run(s) that did not finish: "
            + "; ".join(f"{run} ({why})" for run, why in skipped[:5])
            + (" …" if len(skipped) > 5 else ""),
            SkippedRunsWarning,
            stacklevel=3,
        )
    budget = np.array(out["budget"], dtype=float)
    if np.isfinite(budget).any() and not np.isfinite(budget).all():
        raise UserError(f"{where}: 'budget' is missing for some runs; give it for every run or for none")
    bad = [i for i, b in enumerate(budget) if np.isfinite(b) and b <= 0]
    if bad or np.isinf(budget).any():
        i = bad[0] if bad else int(np.flatnonzero(np.isinf(budget))[0])
        raise UserError(
            f"{where}: run {out['run'][i]!r} has invalid budget = {budget[i]:g} (training FLOPs must be "
            "finite and positive)"
        )
    return RunTable(
        run=np.array(out["run"], dtype=object),
        r=np.array(out["r"], dtype=int),
        n_once=np.array(out["n_once"], dtype=float),
        n_rec=np.array(out["n_rec"], dtype=float),
        tokens=np.array(out["tokens"], dtype=float),
        loss=np.array(out["loss"], dtype=float),
        budget=budget,
        width=np.array(out["width"], dtype=float),
        seed=np.array(out["seed"], dtype=float),
        bptt_k=np.array(out["bptt_k"], dtype=float),
        skipped=skipped,
    )


def _refuse_duplicates(seen: dict[tuple, list[int]], where: str) -> None:
    """One-line UserError naming the runs that appear more than once (method §8.4 counts each run once)."""
    dups = [(key, at) for key, at in seen.items() if len(at) > 1]
    if not dups:
        return
    parts = []
    for key, at in dups[:3]:
        rows = ", ".join(map(str, at))
        parts.append(f"run {key[0]!r} (rows {rows})" if isinstance(key[0], str) else f"rows {rows}")
    more = f" and {len(dups) - 3} more" if len(dups) > 3 else ""
    raise UserError(
        f"{where}: the same run appears more than once: {'; '.join(parts)}{more} (same run name, r, "
        "n_once, n_rec and tokens; without a 'run' column also the same loss); remove the duplicates"
    )
