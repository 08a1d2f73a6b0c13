"""The experimental design (``loopscale design``): choosing the runs that measure φ to a target precision for
the least compute, before running them. A pipeline step of its own, between the sweep spec and the sweep:

- ``prior``: the law and the noise σ (nats) a design is planned under;
- ``candidates``: every run a design may use (budgets × widths × r of a reference sweep; a partial sweep's
  runs as fixed);
- ``predict``: the precision a set of runs buys, from the sandwich covariance of the Huber fit;
- ``search``: designs that keep the fit trustworthy, along a greedy and a pruning path scored by Var(φ) per
  unit cost (training FLOPs or estimated wall seconds);
- ``simulation``: validating designs by simulate-and-refit (``fit_law`` + ``bootstrap_fit``), and the search
  for the cheapest design that realises a target in simulation;
- ``delta_phi``: the power to detect a Δφ between a variant and its base, predicted and simulated;
- ``document``: the emitted sweep spec and the design document's rows (``present.design_text`` words it);
- ``pipeline``: the whole step as one call (``make_design``).
- ``results``: what the step returns, as records (``DesignDocument``, ``PowerRow``, ``PairPick``, …) whose
  ``to_dict`` is the design document's JSON.

Units: budgets and FLOPs are training FLOPs (method §4.2), widths d_model, losses and σ nats, CI widths in the
parameter's own units (E in nats). NumPy/SciPy only: imports ``fit`` and ``sweep``, never torch; ``fit``
never imports this package.
"""

from loopscale.design.candidates import (
    Candidates,
    candidates_from_spec,
    partial_sweep_candidates,
    pick_group,
)
from loopscale.design.delta_phi import (
    cheapest_with_power,
    delta_phi_se,
    power,
    power_table,
    simulate_power,
    simulate_power_in_loop,
)
from loopscale.design.document import design_groups, design_spec, extension_spec
from loopscale.design.pipeline import DesignSettings, PartialSweep, WallModel, make_design
from loopscale.design.predict import Information, huber_moments, log_loss_jacobian
from loopscale.design.prior import Prior, load_prior, prior_from_table
from loopscale.design.search import (
    PER_BUDGET,
    Constraints,
    PathPoint,
    RunDesign,
    bracket_search,
    check_design,
    choose,
    greedy_path,
    pareto,
    pruning_path,
    within_cap,
)
from loopscale.design.simulation import Realisation, agreement, simulate, simulate_in_loop

__all__ = [
    "PER_BUDGET",
    "Candidates",
    "Constraints",
    "DesignSettings",
    "Information",
    "PartialSweep",
    "PathPoint",
    "Prior",
    "Realisation",
    "RunDesign",
    "WallModel",
    "agreement",
    "bracket_search",
    "candidates_from_spec",
    "check_design",
    "cheapest_with_power",
    "choose",
    "delta_phi_se",
    "design_groups",
    "design_spec",
    "extension_spec",
    "greedy_path",
    "huber_moments",
    "load_prior",
    "log_loss_jacobian",
    "make_design",
    "partial_sweep_candidates",
    "pareto",
    "pick_group",
    "power",
    "power_table",
    "prior_from_table",
    "pruning_path",
    "simulate",
    "simulate_in_loop",
    "simulate_power",
    "simulate_power_in_loop",
    "within_cap",
]
