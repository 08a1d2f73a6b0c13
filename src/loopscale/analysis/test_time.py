"""``loopscale eval-depth ARM``: a priced arm's pairs at test-time loop counts {1, r/2, r, 2r}.

For every pair of the arm's last look (price.json), the recipe's run (its own weights) and the base's
seed-matched run are evaluated on their validation tokens at each count (``eval.test_time``; each run's
test_time.json keeps its numbers, so a rerun evaluates only what is missing). A published base keeps no
weights: its runs are evaluated from a retraining of their own config.yaml under ``--weights-from``
(``--retrain`` trains the missing ones there first). The arm's summary (``pairs.results.TestTimeDepth``)
is written to ARM/test_time.json and the arm's report is rendered again with it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from loopscale.errors import UserError
from loopscale.pairs.results import TestTimeDepth, TestTimePair
from loopscale.pairs.test_time import TEST_TIME_FILE, analyse_test_time


@dataclass(frozen=True)
class DepthEvalSettings:
    arm: Path  # a price folder (price.json)
    weights_from: Path | None = None  # where retrained base runs are (one folder per run name)
    retrain: bool = False  # train base runs without weights into ``weights_from`` first
    force: bool = False  # evaluate again even where a run's test_time.json exists

    def validate(self) -> None:
        if self.retrain and self.weights_from is None:
            raise UserError("--retrain needs --weights-from DIR: the folder the base runs are retrained into")


def _runs_by_cell(folder: Path) -> dict[tuple, Path]:
    """{(budget, width, r, seed): run folder} of the finished runs of a sweep folder."""
    from loopscale.sweep.collect import collect_rows
    from loopscale.sweep.rundir import run_dir

    cells: dict[tuple, Path] = {}
    for row in collect_rows(folder):  # read only: the folders' tables and curves are left as they are
        if row.get("status") == "ok":
            cells.setdefault(
                (row["budget"], row["width"], row["r"], row["seed"]), run_dir(folder, row["run"])
            )
    return cells


def _retrain(run: Path, into: Path, echo) -> None:
    from loopscale.config import from_dict, load_yaml
    from loopscale.train.config import TrainConfig
    from loopscale.train.loop import train

    cfg = from_dict(TrainConfig, load_yaml(run / "config.yaml"), str(run / "config.yaml"))
    echo(f"  retraining {run.name} from its config.yaml into {into / run.name}")
    train(cfg, into / run.name)


def eval_depth(settings: DepthEvalSettings, echo=print) -> TestTimeDepth:
    """Evaluate every pair of the arm's last look (module docstring) → the arm's TestTimeDepth."""
    from loopscale.analysis.price import PRICE_FILE, read_price
    from loopscale.eval.test_time import evaluate_run, weights_folder
    from loopscale.io import atomic_write_json
    from loopscale.report.price import write_price_report

    settings.validate()
    arm = settings.arm
    if not (arm / PRICE_FILE).is_file():
        raise UserError(f"{arm}: no {PRICE_FILE}; give a folder written by `loopscale price`")
    result = read_price(arm / PRICE_FILE)
    if result.effects is None:
        raise UserError(f"{arm}: its price.json holds no look yet; rerun `loopscale price` to finish it")
    base = Path(os.path.normpath(arm / result.base))
    variants, bases = _runs_by_cell(arm), _runs_by_cell(base)
    cells = [(row.budget, row.width, row.r, row.seed) for row in result.effects.pairs]
    for cell in cells:
        if cell not in variants or cell not in bases:
            where = arm if cell not in variants else base
            raise UserError(
                f"{where}: no finished run at budget {cell[0]:g}, width {cell[1]}, r {cell[2]}, "
                f"seed {cell[3]}, which the price's pairs hold"
            )
    # the recipe's runs first (their weights are kept), so what can be evaluated is, whatever the base lacks
    variant_evals = [evaluate_run(variants[cell], None, settings.force) for cell in cells]
    missing = [
        bases[c]
        for c in cells
        if weights_folder(bases[c], settings.weights_from) is None
        and not (bases[c] / TEST_TIME_FILE).is_file()
    ]
    if missing and not settings.retrain:
        raise UserError(
            f"{len(missing)} base run(s) of {base} have no weights (published runs keep none) and no "
            f"{TEST_TIME_FILE}: retrain them with `loopscale eval-depth {arm} --weights-from DIR --retrain`"
        )
    for run in missing:
        _retrain(run, settings.weights_from, echo)
    pairs = []
    for cell, variant in zip(cells, variant_evals):
        base_eval = evaluate_run(bases[cell], settings.weights_from, settings.force)
        echo(
            f"  {variants[cell].name}: base / {result.recipe} at r = "
            + ", ".join(
                f"{t}: {b:.4f} / {v:.4f}"
                for t, b, v in zip(base_eval.test_r, base_eval.val_loss, variant.val_loss)
            )
        )
        budget, width, r, seed = cell  # the price's pair rows hold floats (a results table's columns)
        pairs.append(TestTimePair(float(budget), int(width), int(r), int(seed), base_eval, variant))
    depth = analyse_test_time(result.recipe, pairs)
    atomic_write_json(arm / TEST_TIME_FILE, depth.to_dict())
    write_price_report(result, arm, depth)
    return depth
