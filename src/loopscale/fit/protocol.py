"""The whole fitting protocol of method §8 on one results table, as one JSON-ready document.

``run_protocol`` fits the requested law (joint with φ free by default), the restricted φ = 0 and φ = 1
forms, per-r Chinchilla fits, residual statistics, the cell block bootstrap with percentile CIs for every
coefficient, refits on the lower and upper halves of the budgets, and the derived analyses (worth of a loop,
compute-optimal frontier per r, empirical iso-FLOP minima per cell), the profile-likelihood interval for φ
(``fit.profile``) and the diagnostics that say whether φ is identified (``fit.diagnostics``). Parts the table
cannot support (one budget per half, no budgets, no widths for a FLOPs model, a template that does not
reproduce the runs' sizes) are left out with a note in ``notes``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

import numpy as np

from loopscale.config import ModelConfig, to_dict
from loopscale.errors import UserError
from loopscale.fit.analyses import (
    bptt_by_r,
    cell_gaps,
    compute_optimal,
    loop_worth,
    paper_template,
    parabola_minima,
    residual_stats,
)
from loopscale.fit.bootstrap import BOOTSTRAP_RESTARTS, bootstrap_fit, random_effects_bootstrap
from loopscale.fit.diagnostics import diagnose, diagnosis
from loopscale.fit.fitter import LawFit, fit_law
from loopscale.fit.identification_results import BoundsFound, Diagnostics, IdentificationChecks, ProfileResult
from loopscale.fit.law import EXTENSIONS, FORMS, HUBER_DELTA, LOWER, PHI, UPPER
from loopscale.fit.lawcheck import check_law
from loopscale.fit.priors import NO_LAW_CHECK, Held, fixed_settings
from loopscale.fit.profile import compare_intervals, profile_phi
from loopscale.fit.protocol_results import (
    CellBootstrap,
    CellMinimum,
    FitSummary,
    Frontier,
    FrontierEntry,
    LoopWorth,
    ProtocolNote,
    ProtocolResult,
    ProtocolSettings,
    RandomEffectsBootstrap,
    Residuals,
    TableSummary,
)
from loopscale.fit.results import SCHEMA_VERSION, LawCheck, RecordError, read_law_check
from loopscale.fit.table import RunTable
from loopscale.fit.template import PAPER_SOURCE, template_mismatch
from loopscale.progress import progress_bar

TOP_KEYS = ("E", "A", "B", "alpha", "beta", "phi")


@dataclass
class Protocol:
    """Everything ``run_protocol`` computed; ``to_dict()`` is the ``loopscale fit --json`` document
    (fit.json), ``result()`` that document as the report reads it (``fit.protocol_results.ProtocolResult``).
    """

    fit: LawFit  # the requested law; its bootstrap gives ``ci``
    forms: dict[str, LawFit]  # every joint form fitted: "joint", "phi=0", "phi=1", "phi=<x>"
    per_r: dict[str, LawFit]  # plain Chinchilla law per loop count
    residuals: Residuals
    bootstrap: CellBootstrap | None
    budget_halves: dict[str, LawFit]
    loop_worth: tuple[LoopWorth, ...]
    compute_optimal: Frontier | None  # frontier of the fitted law, per r
    compute_optimal_per_r_law: dict[str, FrontierEntry] | None  # each r's from its own Chinchilla fit (§8.7)
    cell_minima: tuple[CellMinimum, ...]
    table_summary: dict
    settings: dict
    diagnostics: Diagnostics  # fit.diagnostics.diagnose: at_bound, phi_identified, …
    notes: list[ProtocolNote] = field(default_factory=list)  # the parts the table could not support
    profile: ProfileResult | None = None  # fit.profile.profile_phi: profile-likelihood interval for φ
    interval: RandomEffectsBootstrap | None = None  # the reported CIs (``ci``)
    law_check: LawCheck | None = None  # fit.lawcheck.check_law: does the paper's law hold on these runs?

    @property
    def ci(self) -> dict[str, tuple[float, float]]:
        """The reported CIs: the random-effects bootstrap's where it ran from a fit inside the box; else the
        cell bootstrap's, with φ's the wider of the cell bootstrap's and the profile's (``ci_method``)."""
        if self.interval is not None and not self.fit.at_bound:
            return self.interval.ci
        if self.bootstrap is None:
            return {}
        ci = dict(self.bootstrap.ci)
        if self.ci_method == "profile":
            lo, hi = self.profile.interval
            ci["phi"] = (LOWER[PHI] if lo is None else lo, UPPER[PHI] if hi is None else hi)
        return ci

    @property
    def ci_method(self) -> str | None:
        """Which interval ``ci.phi`` is: "random_effects_bootstrap", "cell_bootstrap" or "profile"."""
        if self.interval is not None and not self.fit.at_bound:
            return "random_effects_bootstrap"
        if self.bootstrap is None:
            return None
        if self.interval is not None and self.profile is not None and "phi" in self.bootstrap.ci:
            # the fit the random-effects bootstrap simulates from sits on a bound: the wider of the others
            lo, hi = self.profile.interval
            width = (UPPER[PHI] if hi is None else hi) - (LOWER[PHI] if lo is None else lo)
            cell = self.bootstrap.ci["phi"]
            if width > cell[1] - cell[0]:
                return "profile"
        return "cell_bootstrap"

    def secondary_intervals(self) -> dict[str, tuple | None]:
        """φ's other intervals, beside ``ci.phi``: the cell bootstrap's and the profile's."""
        out: dict[str, tuple | None] = {}
        if self.bootstrap is not None and "phi" in self.bootstrap.ci:
            out["cell_bootstrap"] = self.bootstrap.ci["phi"]
        if self.interval is not None and "phi" in self.interval.ci:
            out["random_effects_bootstrap"] = self.interval.ci["phi"]
        if self.profile is not None:
            out["profile"] = self.profile.interval
        return out

    def to_dict(self) -> dict:
        return self.result().to_dict()

    def result(self) -> ProtocolResult:
        """The document as the report reads it (``to_dict`` writes it)."""
        interval = self.interval
        if interval is not None:  # φ's draws alone: the other coefficients' are in the cell bootstrap
            interval = dataclasses.replace(
                interval, samples={k: v for k, v in interval.samples.items() if k == "phi"}
            )
        keys = (*TOP_KEYS, "ext")

        def fits(table: dict[str, LawFit]) -> dict[str, FitSummary]:
            return {k: FitSummary.from_dict(f.to_dict(), k) for k, f in table.items()}

        return ProtocolResult(
            law_check=self.law_check,
            form=self.fit.law_form,
            fit=FitSummary.from_dict(self.fit.to_dict(), "fit"),
            ci={k: v for k, v in self.ci.items() if k in keys},
            ci_method=self.ci_method,
            ci_secondary=self.secondary_intervals(),
            random_effects_bootstrap=interval,
            forms=fits(self.forms),
            per_r=fits(self.per_r),
            residuals=self.residuals,
            bootstrap=self.bootstrap,
            budget_halves=fits(self.budget_halves),
            loop_worth=self.loop_worth,
            compute_optimal=self.compute_optimal,
            compute_optimal_per_r_law=self.compute_optimal_per_r_law,
            cell_minima=self.cell_minima,
            cell_gaps=cell_gaps(self.cell_minima),
            table=TableSummary.from_dict(self.table_summary, "table"),
            settings=ProtocolSettings.from_dict(self.settings, "settings"),
            notes=tuple(self.notes),
            diagnostics=self.diagnostics,
            profile=self.profile,
            schema=SCHEMA_VERSION,
        )


def _primary(fit_at_bound, bootstrap, interval):
    """The bootstrap ``ci.phi``'s identification rests on: the cell bootstrap's when the fit sits on a bound
    (the random-effects bootstrap simulates from that fit), else the random-effects one where it ran."""
    return bootstrap if fit_at_bound else (interval or bootstrap)


def read_protocol(doc: dict) -> ProtocolResult:
    """fit.json as the report reads it: the current form as it is; a document written before the protocol's
    records (no "schema") converted: its sentences (the diagnostics' verdict, reasons and objective note, the
    profile's and the random-effects bootstrap's method, the profile's disagreement) dropped, and the codes
    and numbers they stated recomputed from the fits, intervals and bound shares the document holds. In
    either form a cell minimum's ``reason`` and the notes, sentences before they were codes, become codes."""
    doc = {
        **doc,
        "cell_minima": [_minimum_coded(m) for m in doc["cell_minima"]],
        "notes": [_note_coded(note) for note in doc["notes"]],
    }
    if "schema" in doc:
        return ProtocolResult.from_dict(doc)
    old = doc["diagnostics"]
    boot = None if doc["bootstrap"] is None else CellBootstrap.from_dict(doc["bootstrap"], "bootstrap")
    interval = doc["random_effects_bootstrap"]
    if interval is not None:
        interval = RandomEffectsBootstrap.from_dict(_without(interval, "method"), "random_effects_bootstrap")
    main = LawFit.from_dict(doc["fit"])
    forms = {k: LawFit.from_dict(v) for k, v in doc["forms"].items()}
    primary = _primary(main.at_bound, boot, interval)
    profile = doc["profile"]
    if profile is not None:
        profile = {**_without(profile, "method", "objective_kind"), "disagreement": None}
        profile = ProfileResult.from_dict(profile, "profile")
        boot_ci = primary.ci["phi"] if primary is not None and main.form == "joint" else None
        agrees, disagreement = compare_intervals(profile.interval, boot_ci, profile.level)
        if agrees is not profile.agrees_with_bootstrap:
            raise RecordError("profile: agrees_with_bootstrap does not follow from its intervals")
        profile = dataclasses.replace(profile, disagreement=disagreement)
    diag = diagnosis(main, forms, primary, profile, old["at_bound"]["bootstrap_share"])
    if diag.phi_identified is not old["phi_identified"]:
        raise RecordError("diagnostics: phi_identified does not follow from the fits and intervals")
    diag = dataclasses.replace(
        diag,
        at_bound=BoundsFound.from_dict(old["at_bound"], "diagnostics.at_bound"),
        checks=IdentificationChecks.from_dict(old["checks"], "diagnostics.checks"),
    )
    check = None if not doc.get("law_check") else read_law_check(doc["law_check"])
    return ProtocolResult.from_dict(
        {
            **doc,
            "law_check": check,
            "bootstrap": boot,
            "random_effects_bootstrap": interval,
            "profile": profile,
            "diagnostics": diag,
            "schema": SCHEMA_VERSION,
        }
    )


# The sentences a cell minimum's ``reason`` held before it was a code → the code (matched by a phrase)
_LEGACY_MISSES = {
    "widths run at this budget": "few_widths",
    "the parabola opens downward": "opens_downward",
    "vertex below the narrowest width run": "below_widths",
    "vertex above the widest width run": "above_widths",
}


def _minimum_coded(row: dict) -> dict:
    """A cell minimum with its ``reason`` as a code (a code, or no reason, passes as it is)."""
    reason = row.get("reason")
    if reason is None:
        return row
    code = next((code for phrase, code in _LEGACY_MISSES.items() if phrase in reason), reason)
    return {**row, "reason": code}


# The sentences a note held before it was a record → its code and the fields its sentence quoted: the first
# pattern that matches the sentence's start (present.fit_text.protocol_note_text writes each back as it was)
_LEGACY_NOTES = (
    (r"no per-r fit for r=(?P<r>\d+): (?P<error>.*)", "no_per_r_fit"),
    (r"no budget-half refits: (?P<budgets>\d+) budget\(s\)", "no_budget_halves"),
    (r"no (?P<half>low|high)-half refit: (?P<error>.*)", "no_half_refit"),
    (r"no profile interval: ", "no_profile"),
    (
        r"the random-effects bootstrap simulates from the fit, which has (?P<at_bound>.*) on the edge",
        "fit_at_bound",
    ),
    (re.escape(NO_LAW_CHECK), "no_law_check"),
    (r"no compute-optimal frontier or cell minima: the table has no 'budget' column", "no_budget_column"),
    (r"no compute-optimal frontier: the table has no 'width' column", "no_width_column"),
    (
        r"no compute-optimal frontier: the architecture template \((?P<template>.*)\) does not match the "
        r"runs: (?P<error>.*); pass the sweep's template",
        "template_mismatch",
    ),
    (r"no compute-optimal frontier: (?P<error>.*)", "no_frontier"),
)


def _note_coded(note: str | dict) -> dict:
    """A note as its record's mapping: a sentence (written before notes were records) converted; one no
    pattern matches is a RecordError."""
    if isinstance(note, dict):
        return note
    for pattern, code in _LEGACY_NOTES:
        found = re.match(pattern, note, re.DOTALL)
        if found:
            fields = {k: int(v) if k in ("r", "budgets") else v for k, v in found.groupdict().items()}
            if "at_bound" in fields:
                fields["at_bound"] = fields["at_bound"].split(", ")
            return {"code": code, **fields}
    raise RecordError(f"notes: {note!r} is not a note loopscale wrote")


def _without(data: dict, *keys: str) -> dict:
    return {k: v for k, v in data.items() if k not in keys}


def run_protocol(
    table: RunTable,
    *,
    law: str = "joint",
    fix_phi: float | None = None,
    restarts: int = 500,
    bootstrap: int = 200,
    bootstrap_restarts: int = BOOTSTRAP_RESTARTS,
    seed: int = 0,
    flops_model: ModelConfig | None = None,
    split: str = "paper",
    restricted_phis: tuple[float, ...] = (0.0, 1.0),
    template_source: str | None = None,
    profile: bool = True,
    form: str = "paper",
    noise: float | None = None,
    law_check: bool = True,
    check_resamples: int | None = None,
    held: Held | None = None,
) -> Protocol:
    """Run the method §8 protocol on ``table`` (see the module docstring); ``bootstrap=0``: no bootstrap.

    ``flops_model`` is the architecture template (everything but width and r) used to turn width into
    N and FLOPs per token for the compute-optimal frontier; None uses the paper's template when the table
    has widths (``fit.template.template_for_table`` finds a sweep's own template); ``template_source`` says
    where it came from (recorded in ``settings["template"]``). A template whose N at the runs' widths
    differs from the table's is not used for the frontier (a note says why); the table's ``bptt_k`` column
    gives each r's FLOPs per token as trained (``analyses.bptt_by_r``: truncated BPTT charges its detached
    loops forward only). ``split`` "ls" refits with the
    project page's least-squares N_once/N_rec split (method §3.4). ``profile`` computes the profile-likelihood
    interval for φ (joint law only).

    ``form``: the paper's law or one of its one-parameter extensions (``law.EXTENSIONS``) as the main fit;
    the paper's joint fit is always made too (``forms["joint"]``) and ``law_check`` checks it against the
    runs (``fit.lawcheck``; ``noise`` in nats where the table has no replicate seeds, ``check_resamples``
    for its CIs: default min(100, ``bootstrap``)). The reported CIs (``ci``) come from the random-effects
    bootstrap of the main fit; the cell bootstrap and the profile stay beside them.

    ``held`` (``fit.priors.build_held``: ``--fix``, ``--prior``) holds parameters in every fit, refit and
    profile point; a prior with samples is resampled per bootstrap refit. The law check is then skipped.
    """
    if split not in ("paper", "ls"):
        raise UserError(f"unknown split {split!r}; use 'paper' or 'ls'")
    if form not in FORMS:
        raise UserError(f"unknown law form {form!r}; use one of: {', '.join(FORMS)}")
    extension = EXTENSIONS[form].name if form != "paper" else None
    if extension is not None and (law != "joint" or fix_phi is not None):
        raise UserError(f"--form {form} extends the joint law with phi free; drop --law/--fix-phi")
    if noise is not None and not (math.isfinite(noise) and noise > 0):
        raise UserError(f"--noise must be a positive number of nats, got {noise}")
    notes: list[ProtocolNote] = []
    hold = held.theta if held is not None else {}
    template = flops_model or paper_template()
    template_source = template_source or ("the given model config" if flops_model else PAPER_SOURCE)
    mismatch = template_mismatch(table, template)
    if split == "ls":
        table = table.with_ls_split(template)
    rs = sorted(set(table.r.tolist()))
    restricted = sorted(set(restricted_phis) | ({fix_phi} if fix_phi is not None else set()))
    n_fits = 1 + (extension is not None) + (law == "joint") * (len(restricted) + len(rs) + 2)
    forms: dict[str, LawFit] = {}
    per_r: dict[str, LawFit] = {}
    with progress_bar(n_fits, "fits", "fit") as advance:
        paper_joint = None
        if extension is not None:
            paper_joint = fit_law(table, restarts=restarts, seed=seed, held=hold)
            advance(1)
        main = fit_law(
            table,
            form=law,
            fix_phi=fix_phi,
            restarts=restarts,
            seed=seed,
            extension=extension,
            warm=paper_joint,
            held=hold,
        )
        advance(1)
        if law == "joint":
            if fix_phi is None and extension is None:
                forms["joint"] = main
            else:
                forms["joint"] = paper_joint or fit_law(table, restarts=restarts, seed=seed, held=hold)
            for phi in restricted:
                key = f"phi={phi:g}"
                forms[key] = (
                    main
                    if phi == fix_phi
                    else fit_law(table, fix_phi=phi, restarts=restarts, seed=seed, held=hold)
                )
                advance(1)
            for r in rs:
                try:
                    per_r[str(r)] = fit_law(
                        table.subset(table.r == r), form="chinchilla", restarts=restarts, seed=seed, held=hold
                    )
                except UserError as exc:
                    notes.append(ProtocolNote("no_per_r_fit", r=int(r), error=str(exc)))
                advance(1)
        halves = _budget_halves(table, law, fix_phi, restarts, seed, notes, hold)
        advance(2)
    boot = interval = None
    draws = None if held is None else held.theta_draws(bootstrap)
    refits = dict(resamples=bootstrap, restarts=bootstrap_restarts, seed=seed, held_draws=draws)
    if bootstrap:
        with progress_bar(bootstrap, "cell bootstrap", "refit") as advance:
            boot = bootstrap_fit(main, table, advance=advance, **refits)
        if main.form == "joint":
            with progress_bar(bootstrap, "random-effects bootstrap", "refit") as advance:
                interval = random_effects_bootstrap(main, table, advance=advance, **refits)
    prof = None
    primary = _primary(main.at_bound, boot, interval)  # the interval ``ci.phi`` will report
    if law == "joint" and profile and diagnose(main, forms, primary, None).phi_identified is False:
        # the profile would only add a reason to a verdict already reached, at the cost of a scan over φ
        # on a flat objective (70 s of the demo's 100 s of fitting)
        notes.append(ProtocolNote("no_profile"))
    elif law == "joint" and profile:
        boot_ci = primary.ci["phi"] if primary is not None and main.form == "joint" else None
        warm = [forms["joint"], *(f for k, f in forms.items() if k != "joint")]
        with progress_bar(None, "profile", "step"):
            prof = profile_phi(table, warm, bootstrap_ci=boot_ci, seed=seed)
    if interval is not None and main.at_bound:
        notes.append(ProtocolNote("fit_at_bound", at_bound=tuple(main.at_bound)))
    check = None
    if law_check and hold:
        notes.append(ProtocolNote("no_law_check"))
    elif law == "joint" and law_check:
        with progress_bar(6, "law check", "step") as advance:
            check = check_law(
                table,
                forms["joint"],
                halves if extension is None and fix_phi is None else None,
                noise=noise,
                resamples=min(100, bootstrap) if check_resamples is None else check_resamples,
                seed=seed,
                advance=advance,
            )
    worth = _loops_worth(main, rs, sorted(set(table.budget.tolist())) if table.has_budget else [])
    frontier = frontier_per_r_law = None
    if not table.has_budget:
        notes.append(ProtocolNote("no_budget_column"))
    elif flops_model is None and not np.all(np.isfinite(table.width)):
        notes.append(ProtocolNote("no_width_column"))
    elif mismatch is not None:
        notes.append(ProtocolNote("template_mismatch", template=template_source, error=mismatch))
    else:
        budgets = sorted(set(table.budget.tolist()))
        widths = table.width[np.isfinite(table.width)]
        run_range = (float(widths.min()), float(widths.max())) if widths.size else None
        try:
            ext = None if main.extension is None else (main.extension, main.ext_ref)
            sizes = dict(widths_run=run_range, bptt_k=bptt_by_r(table).k)  # FLOPs per token as trained
            frontier = compute_optimal(
                main.coefficients, budgets, rs, template, split, extension=ext, **sizes
            )
            frontier = dataclasses.replace(frontier, form=main.law_form)
            frontier_per_r_law = {
                r: compute_optimal(f.coefficients, budgets, [int(r)], template, split, **sizes).per_r[r]
                for r, f in per_r.items()
            }
        except UserError as exc:
            notes.append(ProtocolNote("no_frontier", error=str(exc)))
    summary = {
        "n_runs": len(table),
        "r": rs,
        "budgets": sorted(set(table.budget.tolist())) if table.has_budget else [],
        "skipped": [{"run": run, "reason": why} for run, why in table.skipped],
    }
    settings = {
        "law": law,
        "fix_phi": fix_phi,
        "restarts": restarts,
        "bootstrap": bootstrap,
        "bootstrap_restarts": bootstrap_restarts,
        "seed": seed,
        "split": split,
        "huber_delta": HUBER_DELTA,
        "profile": bool(profile and law == "joint"),
        "fixed": fixed_settings(held, fix_phi).to_dict(),
        "prior": None if held is None else held.prior,
        "template": {
            "source": template_source,
            "matches_table": None if not np.all(np.isfinite(table.width)) else mismatch is None,
            "model": to_dict(template),
        },
    }
    return Protocol(
        fit=main,
        forms=forms,
        per_r=per_r,
        residuals=residual_stats(table.loss, main.predict_table(table), table.r),
        bootstrap=boot,
        budget_halves=halves,
        loop_worth=worth,
        compute_optimal=frontier,
        compute_optimal_per_r_law=frontier_per_r_law,
        cell_minima=parabola_minima(table),
        table_summary=summary,
        settings=settings,
        notes=notes,
        diagnostics=diagnose(main, forms, primary, prof),
        profile=prof,
        interval=interval,
        law_check=check,
    )


def _loops_worth(fit: LawFit, rs: list[int], budgets: list[float]) -> tuple[LoopWorth, ...]:
    """What r loops are worth (r^φ unique blocks) under ``fit``'s form, each row saying which form.

    phi-trend-c: one row per (r, budget), φ at that budget; phi-trend-n: φ at the table's centre size
    (N_unrolled = 10^ext_ref); the paper's law and e-per-r: one φ.
    """
    if fit.phi is None:
        return ()
    rows = []
    for r in (r for r in rs if r > 1):
        if fit.extension == "phi-trend-c":
            for c in budgets:
                phi = fit.phi + fit.coefficients["ext"] * (math.log10(c) - fit.ext_ref)
                rows.append(dataclasses.replace(loop_worth(r, phi), phi=phi, budget=c, form=fit.law_form))
        else:
            at = 10**fit.ext_ref if fit.extension == "phi-trend-n" else None
            rows.append(
                dataclasses.replace(loop_worth(r, fit.phi), phi=fit.phi, form=fit.law_form, at_n_unrolled=at)
            )
    return tuple(rows)


def _budget_halves(table, law, fix_phi, restarts, seed, notes, held=None) -> dict[str, LawFit]:
    """Refits on the lower and upper halves of the sorted budgets (an odd middle budget goes to "high")."""
    if not table.has_budget:
        return {}
    budgets = sorted(set(table.budget.tolist()))
    if len(budgets) < 4:
        notes.append(ProtocolNote("no_budget_halves", budgets=len(budgets)))
        return {}
    halves = {}
    for name, mask in table.budget_halves().items():
        try:
            halves[name] = fit_law(
                table.subset(mask), form=law, fix_phi=fix_phi, restarts=restarts, seed=seed, held=held
            )
        except UserError as exc:
            notes.append(ProtocolNote("no_half_refit", half=name, error=str(exc)))
    return halves
