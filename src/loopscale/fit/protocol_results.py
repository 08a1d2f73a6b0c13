"""Typed parts of the fitting protocol's document (fit.json, ``fit.protocol``): numbers and codes only.

Each record's fields are the keys fit.json has held since the protocol landed, so ``to_dict()`` writes the
same JSON; the few keys fit.json only holds where they apply (a frontier row's ``within_widths_run``, a
loop-worth row's ``budget``) are left out while None (``SparseRecord``). Sentences about these results (the
identification verdict, its reasons, the profile's method, …) are written by ``loopscale.present``; a
fit.json written before these records held such sentences, and ``fit.protocol.read_protocol`` converts it.

Units: losses and residuals in nats, compute C in training FLOPs, D in tokens, sizes in parameters, φ and
the other law parameters as fitted (``fit.law``); variance components are standard deviations of log loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from loopscale.fit.identification_results import Diagnostics, ProfileResult
from loopscale.fit.results import LawCheck, Record, SparseRecord

# ---------------------------------------------------------------------------------------------------------
# fit.analyses


@dataclass(frozen=True)
class LoopWorth(SparseRecord):
    """r loops are worth r^φ unique blocks (``worth``); ``fraction`` = r^φ / r of full equivalence. In the
    protocol's rows also the φ used and the law's form; phi-trend-c: the ``budget`` (FLOPs) φ is taken at,
    phi-trend-n: the N_unrolled (parameters) it is taken at."""

    OPTIONAL = ("phi", "budget", "form", "at_n_unrolled")

    r: int
    worth: float
    fraction: float
    phi: float | None = None
    budget: float | None = None
    form: str | None = None
    at_n_unrolled: float | None = None


@dataclass(frozen=True)
class Equivalence(SparseRecord):
    """A non-looped model of ``params`` parameters against the r-loop model at its width (``fit.analyses.
    equivalence``): sizes in parameters, ratios to ``params``, FLOPs ratios per token as trained."""

    OPTIONAL = ("template",)

    params: float
    r: int
    phi: float
    bptt_k: int | None  # loops backpropagated through (None: full BPTT)
    width: float
    unique_params: float
    unique_ratio: float
    effective_params: float
    effective_ratio: float
    effective_ratio_layers_only: float
    worth: float
    flops_ratio: float
    block_flops_overhead: float
    cost_equivalent_params: float
    template: str | None = None  # where the architecture template came from (the CLI names it)


@dataclass(frozen=True)
class ResidualStats(Record):
    """Residuals observed − predicted (nats) of a set of runs."""

    n: int
    mean: float
    max_abs: float
    rmse: float


@dataclass(frozen=True)
class Residuals(Record):
    """The fit's residuals overall and per loop count (keys: r as text)."""

    overall: ResidualStats
    per_r: dict[str, ResidualStats]


@dataclass(frozen=True)
class FrontierRow(SparseRecord):
    """The law's optimum at one (budget, r): width d*, N* (unique), N_eff*, D* (tokens), L* (nats);
    ``at_edge``: on the edge of the width search; ``within_widths_run``: inside the widths the sweep ran
    (None: not known)."""

    OPTIONAL = ("within_widths_run",)

    budget: float
    width: float
    n: float
    n_eff: float
    tokens: float
    loss: float
    at_edge: bool
    within_widths_run: bool | None = None


@dataclass(frozen=True)
class FrontierEntry(SparseRecord):
    """One r's frontier: its rows by budget, N* ∝ C^a_N and D* ∝ C^a_D (two budgets or more), and the loss
    gap to r = 1 per budget (nats; when r = 1 is on the frontier)."""

    OPTIONAL = ("a_N", "a_D", "gap_to_r1")

    rows: tuple[FrontierRow, ...]
    a_N: float | None = None  # noqa: N815 - fit.json's key
    a_D: float | None = None  # noqa: N815
    gap_to_r1: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Frontier(SparseRecord):
    """The compute-optimal frontier (``fit.analyses.compute_optimal``) per r (keys: r as text);
    ``bptt_k``: r → k of the truncated-BPTT arms (None in a fit.json written before it was recorded);
    ``form``: the law's form the protocol fitted it with."""

    OPTIONAL = ("bptt_k", "form")

    split: str
    budgets: tuple[float, ...]
    per_r: dict[str, FrontierEntry]
    bptt_k: dict[str, int] | None = None
    form: str | None = None


MIN_PARABOLA_WIDTHS = 3  # distinct sizes a cell's parabola needs before its vertex means anything
# Why a cell gives no vertex (``present.fit_text.minimum_miss_text`` words it): fewer than
# MIN_PARABOLA_WIDTHS sizes run, a parabola without a minimum, a vertex outside the sizes run
MinimumMiss = Literal["few_widths", "opens_downward", "below_widths", "above_widths"]


@dataclass(frozen=True)
class CellMinimum(SparseRecord):
    """The empirical iso-FLOP vertex of one (budget, r) cell (``fit.analyses.parabola_minima``): N* and L*
    (nats) only where the runs bracket it; ``runs_bracket`` None in a fit.json written before it existed.
    ``reason`` codes why a vertex is not given."""

    OPTIONAL = ("runs_bracket", "reason")

    budget: float
    r: int
    n_runs: int
    n_star: float | None
    loss_star: float | None
    bracketed: bool
    runs_bracket: bool | None = None
    reason: MinimumMiss | None = None


@dataclass(frozen=True)
class CellGap(Record):
    """L*(r) − L*(r = 1) (nats) at one budget, from the cells' iso-FLOP vertices."""

    budget: float
    r: int
    gap: float


# ---------------------------------------------------------------------------------------------------------
# fit.bootstrap

Samples = dict[str, tuple[float, ...]]  # coefficient → its bootstrap values


def as_samples(table: dict[str, np.ndarray]) -> Samples:
    """Bootstrap draws as the records hold them (plain floats)."""
    return {k: tuple(np.asarray(v, dtype=float).tolist()) for k, v in table.items()}


@dataclass(frozen=True)
class CellBootstrap(Record):
    """The cell block bootstrap of a fit (``fit.bootstrap.bootstrap_fit``): percentile ``ci`` at ``level``
    of every coefficient but the held ones, and the draws behind them."""

    resamples: int
    cells: int
    restarts_per_refit: int
    warm_start: bool
    level: float
    held_resampled: tuple[str, ...]
    ci: dict[str, tuple[float, float]]
    samples: Samples


@dataclass(frozen=True)
class RandomEffectsBootstrap(Record):
    """The random-effects parametric bootstrap of a fit (``fit.bootstrap.random_effects_bootstrap``):
    ``components`` are the error standard deviations (log loss) of each group and "iid"; ``samples`` may
    hold φ's draws alone (fit.json keeps only those)."""

    components: dict[str, float]
    resamples: int
    restarts_per_refit: int
    level: float
    held_resampled: tuple[str, ...]
    ci: dict[str, tuple[float, float]]
    samples: Samples


# ---------------------------------------------------------------------------------------------------------
# The whole document (fit.protocol.Protocol.to_dict)

# A part of the protocol the table could not support (``present.fit_text.protocol_note_text`` words it)
NoteCode = Literal[
    "no_per_r_fit", "no_budget_halves", "no_half_refit", "no_profile", "fit_at_bound", "no_law_check",
    "no_budget_column", "no_width_column", "template_mismatch", "no_frontier",
]  # fmt: skip


@dataclass(frozen=True)
class ProtocolNote(SparseRecord):
    """One note of the protocol, with what its sentence quotes: the loop count ``r`` or budget ``half``
    whose fit failed, the number of ``budgets``, the parameters ``at_bound``, the ``template``'s source.
    ``error``: the one-line UserError (or template mismatch) that stopped that part, as raised."""

    OPTIONAL = ("r", "half", "budgets", "at_bound", "template", "error")

    code: NoteCode
    r: int | None = None
    half: Literal["low", "high"] | None = None
    budgets: int | None = None
    at_bound: tuple[str, ...] | None = None
    template: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class FitSummary(SparseRecord):
    """One fitted law as fit.json holds it (``fit.fitter.LawFit.to_dict``): its coefficients (A, B, E and
    their logs a, b, e; φ for the joint forms; ``ext`` for an extension), the minimised objective (summed
    Huber of log loss), R² on raw losses, the parameters on a box edge and those held (labels)."""

    OPTIONAL = ("extension", "ext_label", "ext_ref", "phi", "ext")

    form: str
    law_form: str
    E: float  # noqa: N815 - the law's names
    A: float  # noqa: N815
    B: float  # noqa: N815
    alpha: float
    beta: float
    a: float
    b: float
    e: float
    objective: float
    grad_norm: float
    r2: float
    n_runs: int
    restarts: int
    starts_at_optimum: int
    at_bound: tuple[str, ...]
    held: tuple[str, ...]
    extension: str | None = None
    ext_label: str | None = None
    ext_ref: float | None = None
    phi: float | None = None
    ext: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """In ``LawFit.to_dict``'s key order (the extension's names first, then the coefficients)."""
        data = super().to_dict()
        order = [
            "form",
            "law_form",
            "extension",
            "ext_label",
            "ext_ref",
            "E",
            "A",
            "B",
            "alpha",
            "beta",
            "phi",
        ]
        order += ["a", "b", "e", "ext", "objective", "grad_norm", "r2", "n_runs", "restarts"]
        order += ["starts_at_optimum", "at_bound", "held"]
        return {k: data[k] for k in order if k in data}

    @property
    def coefficients(self) -> dict[str, float]:
        """{E, A, B, alpha, beta[, phi][, ext]}: what ``fit.law.law_loss`` evaluates."""
        coef = {"E": self.E, "A": self.A, "B": self.B, "alpha": self.alpha, "beta": self.beta}
        coef |= {k: v for k, v in (("phi", self.phi), ("ext", self.ext)) if v is not None}
        return coef


@dataclass(frozen=True)
class SkippedRun(Record):
    """A run left out of the fit and why (a reason from the results table's reader)."""

    run: str
    reason: str


@dataclass(frozen=True)
class TableSummary(Record):
    """The runs fitted: how many, the loop counts and budgets (FLOPs), and those left out."""

    n_runs: int
    r: tuple[int, ...]
    budgets: tuple[float, ...]
    skipped: tuple[SkippedRun, ...]


@dataclass(frozen=True)
class TemplateInfo(Record):
    """The architecture template behind the frontier: where it came from, whether it reproduces the runs'
    sizes (None: the table has no widths to check), and the template itself (a ModelConfig mapping)."""

    source: str
    matches_table: bool | None
    model: dict[str, Any]


@dataclass(frozen=True)
class ProtocolSettings(Record):
    """How the protocol was run (``fit.protocol.run_protocol``'s arguments); ``huber_delta`` in log loss;
    ``fixed`` and ``prior``: the parameters held (``fit.priors``)."""

    law: str
    fix_phi: float | None
    restarts: int
    bootstrap: int
    bootstrap_restarts: int
    seed: int
    split: str
    huber_delta: float
    profile: bool
    fixed: dict[str, Any]
    prior: Any
    template: TemplateInfo


@dataclass(frozen=True)
class BaselineValues(Record):
    """Count-model cross-entropies of a dataset's validation targets (nats/token, ``data.baselines``)."""

    unigram: float
    bigram: float
    val_tokens: int  # targets scored
    train_tokens: int  # training target tokens counted
    vocab_size: int


@dataclass(frozen=True)
class Baselines(SparseRecord):
    """The sweep's count baselines (``analysis.baselines``): their ``values`` and the ``dataset`` path
    (relative to the report), or None with the ``note`` that says why they are not available."""

    OPTIONAL = ("dataset",)

    values: BaselineValues | None
    note: str | None
    dataset: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """In the key order fit.json has held (values, dataset, note)."""
        data = super().to_dict()
        return {k: data[k] for k in ("values", "dataset", "note") if k in data}


@dataclass(frozen=True)
class PeakLoad(Record):
    """The machine's load while its fp32 peak was probed: 1-minute load average (None: not recorded) and
    cores."""

    load_1min: float | None
    cores: int


@dataclass(frozen=True)
class MachineUse(Record):
    """How well a sweep used its machine (``analysis.machine.machine_use``): training FLOPs of the finished
    runs, their summed process wall time (s), the per-run overhead share, the busy wall time (s) of the
    ``timed_runs`` and the FLOP/s achieved over it against the probed fp32 matmul peak; ``utilisation`` is
    None when the peak was probed on a loaded machine (``peak_load``)."""

    runs: int
    flops: float
    sum_run_wall_s: float
    overhead_share: float | None
    timed_runs: int
    busy_wall_s: float | None
    achieved_flops_per_s: float | None
    peak_flops_per_s: float | None
    peak_load: PeakLoad | None
    utilisation: float | None


@dataclass(frozen=True)
class ProtocolResult(SparseRecord):
    """The fitting protocol's document (fit.json), read once by the analysis and rendered by report/.

    ``ci``: the reported CIs of the coefficients, ``ci_method`` how φ's was made, ``ci_secondary`` φ's other
    intervals; the fits (``fit``, ``forms``, ``per_r``, ``budget_halves``) as ``FitSummary``; ``notes``:
    parts the table could not support, with why. ``baselines`` and ``machine_use`` are the analysis's
    additions (``analysis.baselines``, ``analysis.machine``), left out of a ``loopscale fit`` document."""

    OPTIONAL = ("baselines", "machine_use")

    law_check: LawCheck | None
    form: str
    fit: FitSummary
    ci: dict[str, tuple[float, float]]
    ci_method: str | None
    ci_secondary: dict[str, tuple[float | None, float | None] | None]
    random_effects_bootstrap: RandomEffectsBootstrap | None
    forms: dict[str, FitSummary]
    per_r: dict[str, FitSummary]
    residuals: Residuals
    bootstrap: CellBootstrap | None
    budget_halves: dict[str, FitSummary]
    loop_worth: tuple[LoopWorth, ...]
    compute_optimal: Frontier | None
    compute_optimal_per_r_law: dict[str, FrontierEntry] | None
    cell_minima: tuple[CellMinimum, ...]
    cell_gaps: tuple[CellGap, ...]
    table: TableSummary
    settings: ProtocolSettings
    notes: tuple[ProtocolNote, ...]
    diagnostics: Diagnostics
    profile: ProfileResult | None
    schema: int
    baselines: Baselines | None = None
    machine_use: MachineUse | None = None

    @property
    def phi_identified(self) -> bool | None:
        return self.diagnostics.phi_identified

    @property
    def phi_ci(self) -> tuple[float, float] | None:
        """φ's reported CI (``ci_method`` says how it was made); None without one."""
        return self.ci.get("phi")
