"""``loopscale price RECIPE --reuse BASE``: what a recipe does to looped models, from seed-matched pairs
trained in batches against a published base, re-read after every batch, stopping honestly (issue 41).

1. **Plan.** The base's looped cells in the order ``design.paired.pick_pairs`` adds them (most precision of
   Δφ beyond an offset per unit of the base run's measured wall time), cut where the training would pass
   the hour cap (single-thread seconds / workers). At least 4 pairs must fit.
2. **Looks.** After the first 4 pairs, then after every ``batch`` more: the variant runs of the cells so
   far are trained (a sweep folder that grows by one group per pair, each with the base run's seed; a rerun
   resumes it and replays the looks), collected, and analysed (``pairs.effects.analyse_pairs``) at this
   look's test size from ``pairs.sequential`` (α spent by information fraction, so looking after every
   batch does not inflate false attribution).
3. **Noise.** A pair's iid sd is the base's seed noise (√2·σ_seed, its replicate df); the (r, width) sd is
   learnt from the pairs so far with the base law's own misfit as a prior worth ``prior_df`` clusters
   (``pairs.effects.pooled_cluster_sd``), so a recipe whose pairs agree closely is not priced at the
   worst-case noise of the base.
4. **Stop** when the rule names an effect (decided), when Δφ's half-width reaches ``target`` (precise), or
   at the plan's last look (the hour cap or the cells ran out).

Writes ``price.json`` (settings, plan, every look, the last look's effect document) after every look and
``loss_change_by_r`` / ``report.md`` at the end; the sweep's own files hold the runs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loopscale.design.paired import PairPlan, plan_pairs, read_base, variant_spec
from loopscale.errors import UserError
from loopscale.pairs.effects import analyse_pairs, pooled_cluster_sd
from loopscale.pairs.results import PairedEffects, PricedLook, PricePlan, PriceResult, TestTimeDepth
from loopscale.pairs.rule import TEST_LEVEL
from loopscale.pairs.sequential import look_counts, look_sizes, simulations_for, spent
from loopscale.pairs.test_time import TEST_TIME_FILE
from loopscale.recipes import RECIPES

PRICE_FILE = "price.json"
MIN_PAIRS = 4


@dataclass(frozen=True)
class PriceSchedule:
    """``plan_price``: the pairs' plan (``plan_pairs``), the looped cells in greedy order within the hour
    cap, and the looks (``PricePlan``: at most ``most`` pairs, the counts, sizes and planned hours)."""

    pairs: PairPlan
    order: tuple[int, ...]  # rows of the base table
    looks: PricePlan


@dataclass(frozen=True)
class PriceSettings:
    """What ``price`` does. Hours are wall hours of training on ``workers`` single-thread workers."""

    recipe: str
    base: Path
    out: Path
    target: float | None = None  # stop once Δφ's half-width is this small (units of φ)
    max_hours: float = 1.0
    batch: int = 2
    workers: int = 2
    alpha: float = TEST_LEVEL
    bootstrap: int = 200  # base-law bootstrap draws per look
    restarts: int = 200
    prior_df: float = 2.0  # the base law's misfit as a prior on the pairs' (r, width) sd, worth this many
    seed: int = 0
    data_root: Path = Path("data")
    trainer: str | None = None  # another trainer's command (the run contract, docs/contract.md)

    def validate(self) -> None:
        if self.recipe not in RECIPES:
            raise UserError(f"unknown recipe {self.recipe!r}; choose one of {', '.join(RECIPES)}")
        for name in ("max_hours", "alpha", "prior_df"):
            if not getattr(self, name) > 0:
                raise UserError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if not self.alpha < 0.5:
            raise UserError(f"--alpha must be below 0.5, got {self.alpha}")
        if self.target is not None and not self.target > 0:
            raise UserError(f"--target must be a positive half-width of delta phi, got {self.target}")
        for name in ("batch", "workers"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.bootstrap < 2:
            raise UserError(f"--bootstrap must be at least 2, got {self.bootstrap}")
        if self.trainer is not None:
            from loopscale.sweep.contract import check_template

            check_template(self.trainer)


def plan_price(settings: PriceSettings) -> PriceSchedule:
    """The base's law and noise (``plan_pairs``), every looped cell in greedy order, how many fit the hour
    cap, the looks and their sizes."""
    base = read_base(settings.base)
    looped = int((base.table.r > 1).sum())
    plan = plan_pairs(settings.base, count=looped, restarts=settings.restarts, seed=settings.seed)
    order = list(plan.picked.order)
    hours = np.cumsum(base.cost[order]) / settings.workers / 3600 if plan.cost_unit == "s" else None
    if hours is None:
        raise UserError(f"the base {settings.base} records no wall times: the hour cap cannot be priced")
    most = int(np.searchsorted(hours, settings.max_hours, side="right"))
    if most < MIN_PAIRS:
        raise UserError(
            f"--max-hours {settings.max_hours} buys {most} of the base's {looped} looped cells on "
            f"{settings.workers} worker(s) (the cheapest {MIN_PAIRS} take {hours[MIN_PAIRS - 1]:.2f} h): "
            f"at least {MIN_PAIRS} pairs are needed"
        )
    counts = look_counts(MIN_PAIRS, settings.batch, most)
    looks = PricePlan(
        most=most,
        counts=tuple(counts),
        sizes=tuple(float(size) for size in look_sizes(counts, most, settings.alpha)),
        hours=tuple(hours[:most].tolist()),
    )
    return PriceSchedule(plan, tuple(order[:most]), looks)


def _look(
    settings: PriceSettings, schedule: PriceSchedule, variant, k: int
) -> tuple[PricedLook, PairedEffects]:
    """Analyse the pairs of look ``k`` (0-based) at its size → (the look, its effect models)."""
    plan, looks = schedule.pairs, schedule.looks
    n, size = looks.counts[k], looks.sizes[k]
    pooled = pooled_cluster_sd(plan.table, variant, plan.fit, plan.cluster_sd, settings.prior_df)
    noise = {"sd": plan.sigma_pair, "cluster_sd": pooled.cluster_sd, "df": plan.noise.df}
    effects = analyse_pairs(
        plan.table,
        variant,
        plan.fit,
        base_resamples=settings.bootstrap,
        simulations=simulations_for(size),
        seed=settings.seed,
        seed_noise=noise,
        size=size,
    )
    phi = effects.models["delta phi"].ci.get("delta_phi")
    half_width = None if phi is None else (phi[1] - phi[0]) / 2
    decided = bool(effects.chosen_terms)
    precise = settings.target is not None and half_width is not None and half_width <= settings.target
    last = k == len(looks.counts) - 1
    look = PricedLook(
        look=k + 1,
        pairs=n,
        size=size,
        spent=spent(n / looks.most, settings.alpha),
        hours_planned=looks.hours[n - 1],
        chosen=effects.chosen,
        chosen_terms=effects.chosen_terms,
        delta_phi_half_width=half_width,
        cluster_sd=pooled,
        stop="decided" if decided else "precise" if precise else "last look" if last else None,
    )
    return look, effects


def price(settings: PriceSettings, echo=print) -> PriceResult:
    """The whole workflow (module docstring) → price.json's document (written after every look)."""
    from loopscale.data import prepare_default
    from loopscale.fit.table import load_table
    from loopscale.io import atomic_write_json, check_output
    from loopscale.sweep.collect import collect
    from loopscale.sweep.plan import plan_sweep
    from loopscale.sweep.rundir import SPEC_FILE, open_sweep, run_state
    from loopscale.sweep.runner import run_sweep, with_data, with_trainer

    settings.validate()
    check_output(settings.out, "--out", folder=True, kind="sweep")
    check_output(settings.data_root, "--data-root", folder=True, kind="data")
    schedule = plan_price(settings)
    looks = schedule.looks
    name = f"price-{settings.recipe}"
    echo(
        f"loopscale price: {settings.recipe} against {settings.base} ({len(schedule.pairs.table)} runs): "
        f"up to {looks.most} seed-matched pairs within {settings.max_hours:g} h on {settings.workers} "
        f"worker(s), looks after {', '.join(map(str, looks.counts))} pairs at sizes "
        + ", ".join(f"{s:.4f}" for s in looks.sizes)
        + f" (alpha {settings.alpha} spent by information fraction)"
    )
    data = None
    result = PriceResult(
        recipe=settings.recipe,
        base=os.path.relpath(settings.base, settings.out),  # published artefacts hold relative paths
        settings=_settings_json(settings),
        plan=looks,
        looks=(),
        effects=None,
    )
    for k, n in enumerate(looks.counts):
        spec = variant_spec(schedule.pairs, settings.recipe, name, runs=schedule.order[:n])
        spec = with_trainer(spec, settings.trainer)
        if data is None:
            data = prepare_default(
                settings.data_root, vocab_size=spec.model["vocab_size"], seq_len=spec.model["seq_len"]
            )
        names = {run.name for run in plan_sweep(spec)}
        if not all(run_state(settings.out, name).status == "ok" for name in names):
            # a rerun whose folder already holds a later look's pairs resumes that sweep as it stands
            recorded = open_sweep(settings.out)[0] if (settings.out / SPEC_FILE).exists() else None
            resume = recorded is not None and recorded.extends(spec)
            spec = None if resume else with_data(spec, str(data))
            run_sweep(spec, settings.out, workers=settings.workers, pairs=_pairs_with(settings, schedule))
        # each look reads its own pairs only, so a replayed look sees what it saw the first time
        ours = [row for row in collect(settings.out)[0] if row["run"] in names]
        rows = [row for row in ours if row.get("status") == "ok"]
        if len(rows) < n:
            failed = sorted(names - {row["run"] for row in rows})
            why = next((f" ({row['run']}: {row['reason']})" for row in ours if row["status"] == "failed"), "")
            raise UserError(
                f"{n - len(rows)} variant run(s) did not finish ({', '.join(failed)}){why}: rerun "
                "`loopscale price` with the same arguments to resume what is unfinished"
            )
        look, effects = _look(settings, schedule, load_table(rows), k)
        result = dataclasses.replace(result, looks=(*result.looks, look), effects=effects)
        atomic_write_json(settings.out / PRICE_FILE, result.to_dict())
        echo(
            f"  look {k + 1}: {n} pairs at size {look.size:.4f}: {effects.chosen}"
            + (f" -> stop ({look.stop})" if look.stop else "")
        )
        if look.stop:
            break
    from loopscale.present.price_text import price_verdict
    from loopscale.report.price import write_price_report

    echo(price_verdict(result))  # the number and its interval end the run, as they lead the report
    echo(f"{name}: {write_price_report(result, settings.out, read_test_time(settings.out))}")
    return result


def _pairs_with(settings: PriceSettings, schedule: PriceSchedule) -> dict[str, str]:
    """Variant run name → the base run folder it pairs with (run.json's ``pairs_with`` under a trainer): the
    variant sweep has one group per pair, in the schedule's order (its runs are planned in another)."""
    from loopscale.sweep.plan import plan_sweep

    table = schedule.pairs.table
    spec = variant_spec(schedule.pairs, settings.recipe, "pairs", runs=schedule.order)
    row = {group.name: i for group, i in zip(spec.groups, schedule.order, strict=True)}
    runs = Path(settings.base) / "runs"
    return {run.name: str(runs / str(table.run[row[run.group]])) for run in plan_sweep(spec)}


def read_price(path: Path) -> PriceResult:
    """price.json as a ``PriceResult``; a file that is not one is a one-line UserError naming it."""
    from loopscale.sweep.rundir import read_record

    return read_record(path, PriceResult, "rerun `loopscale price`")


def read_test_time(arm: Path) -> TestTimeDepth | None:
    """ARM/test_time.json (``loopscale eval-depth``) as a TestTimeDepth, None where the arm has none."""
    from loopscale.sweep.rundir import read_record

    path = arm / TEST_TIME_FILE
    return read_record(path, TestTimeDepth, "rerun `loopscale eval-depth`") if path.is_file() else None


def _settings_json(settings: PriceSettings) -> dict:
    """The settings as JSON, paths relative to the output folder; ``trainer`` only where one was given (a
    price of loopscale's own trainer writes the price.json it wrote before the run contract)."""
    return {
        k: (os.path.relpath(v, settings.out) if isinstance(v, Path) else v)
        for k, v in dataclasses.asdict(settings).items()
        if not (k == "trainer" and v is None)
    }
