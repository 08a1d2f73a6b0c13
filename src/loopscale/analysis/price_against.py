"""``loopscale price RECIPE --reuse BASE --out ARM --against OTHER``: a priced arm's pairs read against
another priced arm instead of against the base (issue 51: Parcae's initial state priced against ``parcae``).

Both arms were priced against the same base on the same plan order (a shorter plan's cells are the first of
a longer one's), so each pair's runs share a cell and a seed: ARM's run minus OTHER's run at that cell and
seed is a seed-matched pair exactly as ARM minus the base is.
The base stays the law: the token part, ∂L/∂φ, the law's bootstrap and the pairs' seed noise come from it,
as in ``price``. The looks of the plan the arguments give (``--max-hours``, ``--plan``) are replayed over the
pairs both arms hold (a look either arm never reached ends the replay there), at that plan's own boundary;
nothing is trained. The result is written to
ARM/against-OTHER/ (price.json, report.md, figures), beside ARM's own price against the base, which it
leaves as it is.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from loopscale.analysis.price import (
    PRICE_FILE,
    PriceSettings,
    plan_power,
    plan_price,
    read_look,
    read_price,
    settings_json,
)
from loopscale.design.paired import variant_spec
from loopscale.errors import UserError
from loopscale.pairs.results import PriceResult
from loopscale.recipes import recorded_recipe

AGAINST_PREFIX = "against-"


def against_folder(settings: PriceSettings) -> Path:
    """Where the price of ``settings.out``'s pairs against ``settings.against`` is written."""
    return settings.out / f"{AGAINST_PREFIX}{settings.against.resolve().name}"


def _priced(folder: Path, flag: str, settings: PriceSettings) -> PriceResult:
    """``folder``'s price.json, checked to be a price against ``settings.base``."""
    path = folder / PRICE_FILE
    if not path.is_file():
        raise UserError(
            f"{flag} {folder} holds no {PRICE_FILE}: give the folder of an arm `loopscale price` priced "
            f"against {settings.base}"
        )
    result = read_price(path)
    if (folder / result.base).resolve() != settings.base.resolve():
        raise UserError(f"{flag} {folder} was priced against {result.base}, not {settings.base}: both arms "
                        "must be priced against the base given with --reuse")  # fmt: skip
    return result


def price_against(settings: PriceSettings, echo=print) -> PriceResult:
    """The module docstring's replay → the result, written to ``against_folder(settings)``."""
    from loopscale.fit.table import load_table
    from loopscale.io import atomic_write_json, check_output, claim_folder
    from loopscale.present.price_text import look_line, price_verdict
    from loopscale.report.price import write_price_report
    from loopscale.sweep.collect import collect
    from loopscale.sweep.plan import plan_sweep

    settings.validate()
    if settings.out.resolve() == settings.against.resolve():
        raise UserError(f"--against {settings.against} is --out itself: give another priced arm")
    mine = _priced(settings.out, "--out", settings)
    _priced(settings.against, "--against", settings)
    if recorded_recipe(mine.settings) != settings.recipe:
        raise UserError(f"{settings.out} prices recipe {mine.recipe}, not {settings.recipe.name}: give the "
                        "recipe it was priced with")  # fmt: skip
    schedule = plan_price(settings)
    counts = tuple(schedule.looks.counts)
    out = against_folder(settings)
    check_output(out, "the against report folder", folder=True, kind="report")
    rows = {
        arm: [row for row in collect(folder)[0] if row.get("status") == "ok"]
        for arm, folder in (("mine", settings.out), ("theirs", settings.against))
    }
    held = []  # per look, both arms' rows of its pairs, while both hold all of them
    for n in counts:
        spec = variant_spec(schedule.pairs, settings.recipe, "pairs", runs=schedule.order[:n])
        names = {run.name for run in plan_sweep(spec)}
        look_rows = {arm: [row for row in arm_rows if row["run"] in names] for arm, arm_rows in rows.items()}
        if min(len(v) for v in look_rows.values()) < n:  # a look one arm never reached ends the replay
            break
        held.append(look_rows)
    if not held:
        raise UserError(
            f"the two arms do not both hold the first look's {counts[0]} pairs of this plan: give the --plan "
            "they were priced on, and at most the shorter arm's --max-hours"
        )
    name = out.name.removeprefix(AGAINST_PREFIX)
    echo(f"loopscale price: {settings.recipe.name} ({settings.out}) against {name}, the law from "
         f"{settings.base}")  # fmt: skip
    result = PriceResult(
        recipe=settings.recipe.name,
        base=os.path.relpath(settings.base, out),
        settings=settings_json(dataclasses.replace(settings, out=out)),
        plan=schedule.looks,
        looks=(),
        effects=None,
        power=plan_power(schedule, settings, search=False),
        against=os.path.relpath(settings.against, out),
    )
    for k, look_rows in enumerate(held):
        look, effects = read_look(settings, schedule, load_table(look_rows["mine"]), k,
                                  load_table(look_rows["theirs"]), last=k == len(held) - 1)  # fmt: skip
        result = dataclasses.replace(result, looks=(*result.looks, look), effects=effects)
        echo(look_line(look))
        if look.stop:
            break
    claim_folder(out, "report")
    atomic_write_json(out / PRICE_FILE, result.to_dict())
    echo(price_verdict(result))
    echo(f"{settings.recipe.name} against {name}: {write_price_report(result, out)}")
    return result
