"""``loopscale price RECIPE --reuse BASE``: what a recipe does to looped models, from seed-matched pairs
trained in batches against a published base, re-read after every batch, stopping honestly (issue 41).

1. **Plan.** The base's looped cells in ``design.paired.pick_pairs``' order (``plan "delta_phi"``, the
   default and every published price's plan: Δφ's precision beyond an offset per second of the base run's
   measured wall time), or with ``plan "separate"`` the base's cells in the order
   ``design.separate.order_cells`` adds them (the power to name each term, every model, offset, Δφ beyond
   an offset and the width slope, per second; r = 1 cells pair the variant's own r = 1 run with the
   base's), cut where the training would pass the hour cap (single-thread seconds / workers). At least 4
   pairs must fit.
2. **Looks.** After the first 4 pairs, then after every ``batch`` more: the variant runs of the cells so
   far are trained (a sweep folder that grows by one group per pair, each with the base run's seed; a rerun
   resumes it and replays the looks), collected, and analysed (``pairs.effects.analyse_pairs``) with every
   term held to this look's boundary value from ``pairs.sequential`` (a family c_k = C·f(t_k) scaled on
   simulated sequences under the plan's null truths, so that looking after every batch names a term the
   truth lacks with chance at most α over the whole sequence).
3. **Noise.** A pair's iid sd is the base's seed noise (√2·σ_seed, its replicate df); the (r, width) sd is
   learnt from the pairs so far with the base law's own misfit as a prior worth ``prior_df`` clusters
   (``pairs.effects.pooled_cluster_sd``), so a recipe whose pairs agree closely is not priced at the
   worst-case noise of the base.
4. **Stop** when the rule names an effect (decided), when Δφ's half-width reaches ``target`` (precise), or
   at the plan's last look (the hour cap or the cells ran out).

Before it trains, the plan's power to name each of ``POWER_TRUTHS`` is simulated with the stopping rule in
the loop (``plan_power``; ``price --dry-run`` prints it with the hours each would need and trains nothing).
Writes ``price.json`` (settings, plan and its boundary, its power, every look, the last look's effect
document) after every look and ``loss_change_by_r`` / ``report.md`` at the end; the sweep's own files hold
the runs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loopscale.design.paired import PairPlan, plan_pairs, read_base, variant_spec
from loopscale.design.separate import (
    CRITERION,
    DELTA_PHI_ONLY,
    Candidates,
    candidates,
    order_cells,
    separation,
    with_extension,
)
from loopscale.errors import UserError
from loopscale.pairs.effects import Pairs, analyse_pairs, base_law, pooled_cluster_sd
from loopscale.pairs.results import (
    PairedEffects,
    PlanPower,
    PowerRow,
    PricedLook,
    PricePlan,
    PriceResult,
    TestTimeDepth,
)
from loopscale.pairs.rule import TEST_LEVEL, Simulator, known_covariance, sequence_nulls
from loopscale.pairs.sequential import (
    SHAPES,
    LookStatistics,
    at_critical,
    look_counts,
    run_sequences,
    scaled_boundary,
    simulate_looks,
)
from loopscale.pairs.test_time import TEST_TIME_FILE
from loopscale.recipes import Recipe, check_recipe, recorded_recipe

PRICE_FILE = "price.json"
MIN_PAIRS = 4
PLANS = ("separate", "delta_phi")
CHOSEN_BY = {"separate": CRITERION, "delta_phi": DELTA_PHI_ONLY}


@dataclass(frozen=True)
class PriceSchedule:
    """``plan_price``: the pairs' plan (``plan_pairs``), the cells it may pair at (``Candidates``: the base's
    rows first, then any extension cells) in greedy order with the cumulative wall hours each reaches, the
    simulator of their pairs (``plan_simulator``), the looks (``PricePlan``: at most ``most`` pairs, the
    counts, the boundary, the planned hours, what they separate) and the null sequences the boundary was
    scaled on."""

    pairs: PairPlan
    cells: Candidates
    order: tuple[int, ...]  # rows of ``cells.table`` (= the base table's rows for base cells)
    hours: tuple[float, ...]  # wall hours on the workers once each cell of ``order`` is trained
    sim: Simulator
    looks: PricePlan
    nulls: tuple[LookStatistics, ...]  # the null truths' simulated sequences the boundary was scaled on


@dataclass(frozen=True)
class PriceSettings:
    """What ``price`` does. Hours are wall hours of training on ``workers`` single-thread workers."""

    recipe: Recipe
    base: Path
    out: Path
    target: float | None = None  # stop once Δφ's half-width is this small (units of φ)
    max_hours: float = 1.0
    batch: int = 2
    workers: int = 2
    alpha: float = TEST_LEVEL  # the chance of a wrong name, or of a final interval missing, over all looks
    bootstrap: int = 200  # base-law bootstrap draws per look
    restarts: int = 200
    prior_df: float = 2.0  # the base law's misfit as a prior on the pairs' (r, width) sd, worth this many
    seed: int = 0
    data_root: Path = Path("data")
    boundary: str = "obf"  # the looks' boundary family (pairs.sequential.SHAPES)
    sequences: int = 1000  # simulated sequences per truth for the boundary and the plan's power
    trainer: str | None = None  # another trainer's command (the run contract, docs/contract.md)
    # which cells first: "separate" (design.separate's criterion) or "delta_phi" (the plan every published
    # price ran, so a caller's or a published arm's price replays as it was)
    plan: str = "delta_phi"
    # another priced arm of the same base and plan: read this recipe's pairs against its runs instead of the
    # base's (``analysis.price_against``; nothing is trained)
    against: Path | None = None

    def validate(self) -> None:
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
        if self.boundary not in SHAPES:
            raise UserError(f"--boundary must be one of {', '.join(SHAPES)}, got {self.boundary!r}")
        if self.plan not in PLANS:
            raise UserError(f"--plan must be one of {', '.join(PLANS)}, got {self.plan!r}")
        if self.sequences < 100:
            raise UserError(f"--sequences must be at least 100, got {self.sequences}")
        if self.trainer is not None:
            from loopscale.sweep.contract import check_template

            check_template(self.trainer)


def plan_order(
    settings: PriceSettings, extend: bool = False, start=()
) -> tuple[PairPlan, Candidates, tuple, tuple]:
    """The base's law and noise (``plan_pairs``), the cells a plan may pair at (with ``extend``, a base
    extension's too: ``design.separate.candidates``), their greedy order under ``settings.plan`` (the
    separating plan from ``start``, rows already paired, kept first) and the cumulative wall hours on the
    workers each cell of it reaches."""
    from loopscale.sweep.results import read_results

    settings.validate()
    base = read_base(settings.base)
    looped = int((base.table.r > 1).sum())
    plan = plan_pairs(settings.base, count=looped, restarts=settings.restarts, seed=settings.seed)
    if plan.cost_unit != "s":
        raise UserError(f"the base {settings.base} records no wall times: the hour cap cannot be priced")
    cells = candidates(plan, read_results(settings.base / "results.csv"), base.cost, extend)
    if settings.plan == "delta_phi":
        order = tuple(plan.picked.order)
    else:  # r = 1 cells only for a recipe that makes a plain model (not one that needs loops)
        plain = takes_plain(settings.recipe, base.spec, cells.table)
        rows = np.flatnonzero((cells.table.r > 1) | plain)
        order = order_cells(cells, rows, plan.sigma_pair, plan.cluster_sd, len(rows), start=start)
    hours = tuple((np.cumsum(cells.cost[list(order)]) / settings.workers / 3600).tolist())
    return plan, cells, order, hours


def plan_price(settings: PriceSettings, extend: bool = False, start=()) -> PriceSchedule:
    """The plan's cells in greedy order (``plan_order``), how many fit the hour cap, the looks and their
    boundary (simulated on the plan's pairs under its null truths) and what the pairs separate."""
    plan, cells, order, hours = plan_order(settings, extend, start)
    most = pairs_within(hours, settings.max_hours, settings.workers)
    # a plan with extension cells is simulated as it would run once they are in the base (the law refitted)
    trained = with_extension(plan, cells, order[:most], settings.restarts, settings.seed)
    sim = plan_simulator(trained, cells.table, order, settings.bootstrap, settings.seed)
    counts = look_counts(MIN_PAIRS, settings.batch, most)
    nulls = null_sequences(sim, counts, settings)
    boundary = scaled_boundary(nulls, most, available_terms(sim), settings.alpha, settings.boundary)
    looks = PricePlan(
        most=most,
        counts=tuple(counts),
        sizes=tuple(1 - level for level in boundary.levels),
        hours=hours[:most],
        boundary=boundary,
        separation=separation(
            cells, order[:most], plan.sigma_pair, plan.cluster_sd, CHOSEN_BY[settings.plan]
        ),
    )
    return PriceSchedule(plan, cells, order, hours, sim, looks, tuple(nulls))


def takes_plain(recipe: Recipe, spec: dict, cells) -> bool:
    """Whether the recipe changes a plain (r = 1) model, so that its own r = 1 runs pair with the base's
    and pin an every-model change: its overrides make a valid r = 1 run at every r = 1 width of ``cells`` (a
    RunTable; Parcae's injection needs r ≥ 2) that differs from the base's run there (truncated BPTT leaves
    an r = 1 run as it was: a pair of two identical runs tells nothing)."""
    from loopscale.config import from_dict
    from loopscale.sweep.plan import plan_sweep
    from loopscale.sweep.spec import SweepSpec

    widths = sorted({int(w) for w, r in zip(cells.width, cells.r) if r == 1})
    try:
        check_recipe(recipe, spec, [(w, 1) for w in widths])
    except UserError:
        return False
    changes = recipe.changes()
    if not widths or changes.get("train"):
        return bool(widths)
    keys = ("batch_tokens", "model", "train", "nproc")
    group = {"name": "plain", "rs": [1], "grid": [{"budget": 1e12, "widths": [widths[0]]}]}
    models = [
        plan_sweep(from_dict(SweepSpec, {"name": "p", **{k: spec[k] for k in keys if k in spec},
                                         "groups": [{**group, **extra}]}, "plain"))[0].model
        for extra in ({}, changes)
    ]  # fmt: skip
    return models[0] != models[1]


def pairs_within(hours, max_hours: float, workers: int) -> int:
    """How many cells of the greedy order fit ``max_hours`` (cumulative ``hours``); at least
    ``MIN_PAIRS`` or a UserError."""
    most = int(np.searchsorted(hours, max_hours, side="right"))
    if most < MIN_PAIRS:
        raise UserError(
            f"--max-hours {max_hours} buys {most} of the base's {len(hours)} looped cells on {workers} "
            f"worker(s) (the cheapest {MIN_PAIRS} take {hours[MIN_PAIRS - 1]:.2f} h): at least {MIN_PAIRS} "
            "pairs are needed"
        )
    return most


def plan_simulator(plan: PairPlan, cells, order, resamples: int, seed: int) -> Simulator:
    """Simulated pairs at the rows ``order`` (plan order) of ``cells`` (a RunTable: the base's, or the base's
    and an extension's) as ``price`` starts: errors with the base's seed noise and the base law's (r, width)
    misfit, taken as known, read through ``resamples`` base-law bootstrap draws."""
    runs = cells.subset(np.array(order))
    keys = sorted({(int(r), float(w)) for r, w in zip(runs.r, runs.width)})
    cluster = np.array([keys.index((int(r), float(w))) for r, w in zip(runs.r, runs.width)])
    law = base_law(plan.fit, plan.table, Pairs(runs, runs, cluster, keys), resamples, seed)
    sd, cluster_sd = plan.sigma_pair, plan.cluster_sd
    return Simulator(
        np.zeros(len(runs)), law.phi_slope(law.theta)[0], law.token_part(law.draws), law.phi_slope(law.draws),
        runs.r > 1, cluster, {"iid": sd**2, "cluster": cluster_sd**2}, plan.noise.df,
        known_covariance(cluster, sd, cluster_sd),
    )  # fmt: skip


def available_terms(sim: Simulator) -> tuple[str, ...]:
    """The terms a plan's pairs tell apart: an every-model change only where it trains r = 1 pairs."""
    return (("every",) if np.any(~sim.looped) else ()) + ("offset", "delta_phi")


def null_sequences(sim: Simulator, counts, settings: PriceSettings) -> list[LookStatistics]:
    """The plan's null truths' (``rule.sequence_nulls``) simulated sequences read at ``counts``."""
    available = available_terms(sim)
    rng = np.random.default_rng(settings.seed + 41)
    return simulate_looks(sim, counts, available, sequence_nulls(available), settings.sequences, rng)


def read_look(
    settings: PriceSettings,
    schedule: PriceSchedule,
    variant,
    k: int,
    reference=None,
    last: bool | None = None,
) -> tuple[PricedLook, PairedEffects]:
    """Analyse the pairs of look ``k`` (0-based) at its size → (the look, its effect models); ``reference``:
    the runs the variant pairs with where not the base's, ``last``: whether no look follows (default: the
    plan's last look) (``analysis.price_against``)."""
    plan, looks = schedule.pairs, schedule.looks
    n, size, critical = looks.counts[k], looks.sizes[k], looks.boundary.critical[k]
    pooled = pooled_cluster_sd(plan.table, variant, plan.fit, plan.cluster_sd, settings.prior_df, reference)
    noise = {"sd": plan.sigma_pair, "cluster_sd": pooled.cluster_sd, "df": plan.noise.df}
    effects = analyse_pairs(
        plan.table,
        variant,
        plan.fit,
        base_resamples=settings.bootstrap,
        seed=settings.seed,
        seed_noise=noise,
        size=size,
        critical=critical,
        reference=reference,
    )
    phi = effects.models["delta phi"].ci.get("delta_phi")
    half_width = None if phi is None else (phi[1] - phi[0]) / 2
    decided = bool(effects.chosen_terms)
    precise = settings.target is not None and half_width is not None and half_width <= settings.target
    last = k == len(looks.counts) - 1 if last is None else last
    look = PricedLook(
        look=k + 1,
        pairs=n,
        size=size,
        spent=looks.boundary.spent[k],
        hours_planned=looks.hours[n - 1],
        chosen=effects.chosen,
        chosen_terms=effects.chosen_terms,
        delta_phi_half_width=half_width,
        cluster_sd=pooled,
        stop="decided" if decided else "precise" if precise else "last look" if last else None,
        critical=critical,
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
    from loopscale.present.price_text import look_line, plan_lines

    recipe, saved = settings.recipe, settings.out / PRICE_FILE
    previous = read_price(saved) if saved.is_file() else None
    recorded = recipe if previous is None else recorded_recipe(previous.settings)
    start: tuple[int, ...] = ()
    if previous is not None:  # a resumed price keeps a separating plan, and turns separating when asked to:
        # then its pairs so far come first, in their order, and the criterion continues from them
        begun = previous.settings.get("plan", "delta_phi")  # before issue 51: delta_phi
        settings = dataclasses.replace(settings, plan="separate" if "separate" in (begun, settings.plan)
                                       else "delta_phi")  # fmt: skip
        start = paired_rows(settings) if settings.plan == "separate" else ()
    if recorded != recipe:  # a resumed price prices the recipe it began with
        raise UserError(f"{settings.out} prices recipe {recorded.name} ({' '.join(recorded.overrides)}), not "
                        f"{recipe.name} ({' '.join(recipe.overrides)}): resume it with that recipe, or give "
                        "another --out")
    _check_recipe(settings)
    schedule = plan_price(settings, start=start)
    looks = schedule.looks
    name = f"price-{recipe.name}"
    power = plan_power(schedule, settings, search=False)
    echo(
        f"loopscale price: {recipe.name} against {settings.base} ({len(schedule.pairs.table)} runs): "
        f"up to {looks.most} seed-matched pairs within {settings.max_hours:g} h on {settings.workers} "
        "worker(s)"
    )
    for line in plan_lines(looks, power):
        echo(f"  {line}")
    data = None
    result = PriceResult(
        recipe=recipe.name,
        base=os.path.relpath(settings.base, settings.out),  # published artefacts hold relative paths
        settings=settings_json(settings),
        plan=looks,
        looks=(),
        effects=None,
        power=power,
    )
    for k, n in enumerate(looks.counts):
        spec = variant_spec(schedule.pairs, recipe, name, runs=schedule.order[:n])
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
        look, effects = read_look(settings, schedule, load_table(rows), k)
        result = dataclasses.replace(result, looks=(*result.looks, look), effects=effects)
        atomic_write_json(settings.out / PRICE_FILE, result.to_dict())
        echo(look_line(look))
        if look.stop:
            break
    from loopscale.present.price_text import price_verdict
    from loopscale.report.price import write_price_report

    echo(price_verdict(result))  # the number and its interval end the run, as they lead the report
    echo(f"{name}: {write_price_report(result, settings.out, read_test_time(settings.out))}")
    return result


# The truths whose power a plan states before it spends (issue 49): {term: sizes}, nats for a constant on
# looped pairs (offset) or on every pair (every), φ for Δφ (named beyond an offset, as the rule tests it).
POWER_TRUTHS = {
    "offset": (-0.06, -0.03, 0.03, 0.06),
    "delta_phi": (-0.15, -0.08, 0.08, 0.15),
    "every": (-0.03, 0.03),
}
POWER_TARGET = 0.8


def plan_power(schedule: PriceSchedule, settings: PriceSettings, search: bool = True) -> PlanPower:
    """The power of the plan to name each of ``POWER_TRUTHS``: the share of simulated sequences, with the
    stopping rule and the plan's boundary in the loop, that stop naming the truth's term. With ``search``,
    also the smallest plan (the base's cells in the same greedy order, cut at an hour cap, with the looks
    and the boundary of that plan) that names it with ``POWER_TARGET`` power (bisection over its pairs)."""
    sim, available, looks = schedule.sim, available_terms(schedule.sim), schedule.looks
    top = len(schedule.order) if search else looks.most
    read = tuple(range(MIN_PAIRS, top + 1)) if search else looks.counts
    nulls = null_sequences(sim, read, settings) if search else list(schedule.nulls)
    rng = np.random.default_rng(settings.seed + 43)
    rows = [(t, v, t if t in available else "offset") for t, sizes in POWER_TRUTHS.items() for v in sizes]
    simulated = [(t, v) for t, v, _ in rows if t in available]
    drawn = simulate_looks(sim, read, available, [{t: v} for t, v in simulated], settings.sequences, rng)
    stats = dict(zip(simulated, drawn))  # an inseparable every-model change is read as the offset it is
    cache: dict[int, tuple] = {}

    def powers(most: int) -> tuple:
        if most not in cache:
            counts = look_counts(MIN_PAIRS, settings.batch, most)
            boundary = scaled_boundary([s.at(counts) for s in nulls], most, available, settings.alpha,
                                       settings.boundary)  # fmt: skip
            rules = at_critical(available, boundary.critical)
            runs = {key: run_sequences(s.at(counts), rules) for key, s in stats.items()}
            named = {(t, v): float(runs[t if t in available else n, v].named[n].mean()) for t, v, n in rows}
            cache[most] = boundary, named
        return cache[most]

    def smallest(key) -> int | None:
        if powers(top)[1][key] < POWER_TARGET:
            return None
        lo, hi = MIN_PAIRS - 1, top  # power below the target at lo (no plan), at or above it at hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if powers(mid)[1][key] >= POWER_TARGET else (mid, hi)
        return hi

    boundary, named = powers(looks.most)
    out = []
    for t, v, n in rows:
        need = smallest((t, v)) if search else None
        out.append(PowerRow(term=t, size=v, named_as=n, power=named[(t, v)], pairs=need,
                            hours=None if need is None else schedule.hours[need - 1]))  # fmt: skip
    return PlanPower(
        hours=settings.max_hours, pairs=looks.most, sequences=settings.sequences, target=POWER_TARGET,
        boundary=boundary, rows=tuple(out), most_pairs=top, most_hours=schedule.hours[top - 1],
    )  # fmt: skip


def dry_run(
    settings: PriceSettings, extend: bool = False
) -> tuple[PricePlan, PlanPower, list[tuple[float, int, int]]]:
    """``price --dry-run``: the plan at ``settings.max_hours`` (its looks, boundary and separation) and its
    power with the hours each truth's target power needs, and, with ``extend`` (base extension cells among
    the candidates), the extension's (budget FLOPs, width, r) cells within the hour cap: the base runs to
    train first (``design.separate.extension_sweep``). Trains and writes nothing."""
    schedule = plan_price(settings, extend)
    cells, most = schedule.cells, schedule.looks.most
    t = cells.table
    ext = [
        (float(t.budget[i]), int(t.width[i]), int(t.r[i]))
        for i in schedule.order[:most]
        if cells.extension[i]
    ]
    return schedule.looks, plan_power(schedule, settings, search=True), ext


def paired_rows(settings: PriceSettings) -> tuple[int, ...]:
    """The base table's rows of the pairs ``settings.out``'s sweep already plans (one group per pair, its
    cell and seed), in pair order; () where the folder holds no sweep yet."""
    from loopscale.sweep.rundir import SPEC_FILE, open_sweep

    if not (settings.out / SPEC_FILE).is_file():
        return ()
    table = read_base(settings.base).table
    cells = zip(table.budget, table.width, table.r, table.seed)
    index = {(float(b), float(w), int(r), float(s)): i for i, (b, w, r, s) in enumerate(cells)}
    rows = []
    for run in open_sweep(settings.out)[1]:
        key = (float(run.budget), float(run.width), int(run.r), float(run.seed))
        if key not in index:
            raise UserError(f"{settings.out}: pair {run.name} has no base run in {settings.base} at its cell")
        rows.append((int(run.group.removeprefix("pair").split("-")[0]), index[key]))
    return tuple(i for _, i in sorted(rows))


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


def _check_recipe(settings: PriceSettings) -> None:
    """Before the plan's fit: the recipe's overrides at every looped cell of the base (``check_recipe``), and
    a plugin's loop hook, its declared parameters and FLOPs against the model's (``model.measure``) at two
    corners of the cells, the narrowest model at the most loops and the widest at the fewest (a declaration
    is a function of width and r; a counted pass costs seconds)."""
    base = read_base(settings.base)
    cells = sorted({(int(w), int(r)) for w, r in zip(base.table.width, base.table.r) if r > 1})
    configs = check_recipe(settings.recipe, base.spec, cells)
    if configs[0].loop_hook is not None:
        from loopscale.model.measure import check_hook_counts

        corners = {min(cells, key=lambda c: (c[0], -c[1])), max(cells, key=lambda c: (c[0], -c[1]))}
        for cfg in configs:
            if (cfg.width, cfg.r) in corners:
                check_hook_counts(cfg, settings.recipe.name)


def settings_json(settings: PriceSettings) -> dict:
    """The settings as JSON, paths relative to the output folder, the recipe as its name and overrides;
    ``trainer`` and ``against`` only where given (a price of loopscale's own trainer against the base writes
    the price.json it wrote before the run contract)."""
    fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    recipe = fields.pop("recipe")
    for optional in ("trainer", "against"):
        if fields[optional] is None:
            del fields[optional]
    return {
        "recipe": recipe.name,
        "overrides": list(recipe.overrides),
        **{k: (os.path.relpath(v, settings.out) if isinstance(v, Path) else v) for k, v in fields.items()},
    }
