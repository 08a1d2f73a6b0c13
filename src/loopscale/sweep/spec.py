"""Sweep specification: a YAML file → typed dataclasses (unknown keys refused).

A sweep is a set of *groups*; each group crosses its compute budgets (FLOPs) and widths (d_model) with its
loop counts r. Every run of every group shares the sweep's architecture template (``model``) and training
recipe (``train``); a group may change the template (e.g. ``injection: hyperconnect``) and its truncation
window (``bptt``). Groups let one sweep hold a case study and its shared r = 1 anchor runs (method §5.3).

Example::

    name: my-sweep
    batch_tokens: 8192          # tokens per optimiser step (B)
    model: {depth: 10, prelude: 1, coda: 1, head_dim: 32, vocab_size: 4096, seq_len: 256}
    train: {data: {path: data/default}, optim: {recipe: muonh}}
    groups:
      - name: main
        rs: [1, 2, 4, 8]
        grid:
          - {budget: 1e13, widths: [64, 96, 128]}
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loopscale.config import ModelConfig, from_dict, load_yaml
from loopscale.errors import UserError
from loopscale.io import shown

# Keys of the run's TrainConfig that the sweep sets per run; ``train:`` may not set them.
SWEEP_OWNED_TRAIN_KEYS = ("model", "budget", "steps", "batch_tokens", "seed")
# A group name starts every run folder's name (with about 40 characters of budget, width, r and seed), so
# it is bounded well inside the 255-byte file-name limit; \Z, not $, which also matches before a final "\n".
_GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,99}\Z")


@dataclass
class BudgetWidths:
    """One iso-FLOP curve: a compute budget C (training FLOPs) and the widths (d_model) run at it."""

    budget: float
    widths: list[int]

    def validate(self) -> None:
        # The one check of a run's budget: every RunGroup validates its cells (run names format it).
        if not (math.isfinite(self.budget) and self.budget > 0):
            raise UserError(f"grid: budget must be a positive finite number of FLOPs, got {self.budget:g}")
        if not self.widths:
            raise UserError(f"grid: budget {self.budget:.3g} lists no widths")
        if len(set(self.widths)) != len(self.widths):
            raise UserError(f"grid: budget {self.budget:.3g} lists a width twice: {self.widths}")


@dataclass
class RunGroup:
    """Runs that share a model variant: ``grid`` × ``rs``.

    ``model``: ModelConfig keys that override the sweep template for this group (not width or r).
    ``train``: TrainConfig keys deep-merged over the sweep's recipe for this group (a recipe variant whose
    Δφ is measured against anchor runs of the sweep recipe).
    ``bptt``: gradient window through the loops: "full" (k = r), "ceil_half" (k = ⌈r/2⌉, the paper's
    truncated-BPTT case study) or an integer k (capped at r).
    ``seeds``: this group's seeds instead of the sweep's (e.g. a group of replicate runs with ``seeds: [1]``
    on a few cells of the main grid; the fit pools runs by budget, width and r, not by group).
    """

    name: str
    rs: list[int]
    grid: list[BudgetWidths]
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    bptt: str = "full"
    seeds: list[int] | None = None

    def validate(self) -> None:
        if not _GROUP_NAME.match(self.name):
            raise UserError(
                f"group name {shown(self.name)!r} must be 1-100 letters, digits, '.' or '-', starting with a "
                "letter or digit (it names run folders)"
            )
        if not self.rs:
            raise UserError(f"group {self.name!r}: rs is empty; list at least one loop count")
        if any(r < 1 for r in self.rs) or len(set(self.rs)) != len(self.rs):
            raise UserError(f"group {self.name!r}: rs must be distinct integers >= 1, got {self.rs}")
        if not self.grid:
            raise UserError(f"group {self.name!r}: grid is empty; add at least one budget with widths")
        for cell in self.grid:
            cell.validate()
        budgets = [b.budget for b in self.grid]
        if len(set(budgets)) != len(budgets):
            raise UserError(f"group {self.name!r}: a budget appears twice in the grid")
        bad = sorted(set(self.model) & {"width", "r", "bptt_k"})
        if bad:
            raise UserError(
                f"group {self.name!r}: model may not set {', '.join(bad)} (width and r come from the grid, "
                "bptt_k from 'bptt')"
            )
        _refuse_owned_train_keys(f"group {self.name!r}", self.train)
        if self.seeds is not None and (not self.seeds or len(set(self.seeds)) != len(self.seeds)):
            raise UserError(f"group {self.name!r}: seeds must be a non-empty list of distinct integers")
        if self.bptt not in ("full", "ceil_half") and not (self.bptt.isdigit() and int(self.bptt) >= 1):
            raise UserError(
                f"group {self.name!r}: bptt must be 'full', 'ceil_half' or an integer >= 1, got {self.bptt!r}"
            )

    def bptt_k(self, r: int) -> int | None:
        """Truncation window for loop count r (None = full backpropagation through all r loops)."""
        if self.bptt == "full" or r == 1:
            return None
        if self.bptt == "ceil_half":
            return -(-r // 2)
        return min(int(self.bptt), r)


@dataclass
class SweepSpec:
    """A whole sweep: groups of (budget, width, r) runs, one template, one recipe.

    ``batch_tokens``: tokens per optimiser step B (steps = round(C / (F·B)), method §4.4).
    ``model``: ModelConfig keys shared by every run (not width or r).
    ``train``: TrainConfig keys shared by every run (data, optim, device, …), except the ones the sweep
    sets per run: model, budget, steps, batch_tokens, seed.
    ``seeds``: one run per seed in every cell.
    ``nproc``: processes per run (> 1 launches the run with torchrun).
    ``reuse``: sweep folders (paths as given, relative to the working directory like ``train.data.path``)
    whose finished runs this sweep takes instead of training them again: a run is reused when the source
    folder holds a run of the same name, finished ok, whose run.yaml is identical to this run's (same model,
    recipe, data, budget and seed). A case study's r = 1 anchors are its base sweep's runs this way.
    ``trainer``: another trainer's command, run for every run through the run contract
    (``sweep.contract``, docs/contract.md); None: loopscale's own ``loopscale train``.
    """

    name: str
    groups: list[RunGroup]
    batch_tokens: int
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: [0])
    nproc: int = 1
    reuse: list[str] = field(default_factory=list)
    trainer: str | None = None

    def validate(self) -> None:
        if not self.groups:
            raise UserError(f"sweep {self.name!r}: groups is empty; add at least one group with a grid")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise UserError(f"sweep {self.name!r}: group names must be unique, got {names}")
        if self.batch_tokens < 1:
            raise UserError(f"sweep {self.name!r}: batch_tokens must be >= 1, got {self.batch_tokens}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise UserError(f"sweep {self.name!r}: seeds must be a non-empty list of distinct integers")
        if self.nproc < 1:
            raise UserError(f"sweep {self.name!r}: nproc must be >= 1, got {self.nproc}")
        bad = sorted(set(self.model) & {"width", "r", "bptt_k"})
        if bad:
            raise UserError(
                f"sweep {self.name!r}: model may not set {', '.join(bad)} (they come from the grid)"
            )
        _refuse_owned_train_keys(f"sweep {self.name!r}", self.train)
        if len(set(self.reuse)) != len(self.reuse) or not all(self.reuse):
            raise UserError(f"sweep {self.name!r}: reuse must list distinct sweep folders, got {self.reuse}")
        if self.trainer is not None:
            from loopscale.sweep.contract import check_template

            check_template(self.trainer)

    def extends(self, other: SweepSpec) -> bool:
        """True when this spec is ``other`` with groups added after its own (every other field, and every
        group ``other`` has, unchanged): a sweep folder may grow this way, since no finished run changes."""
        if len(self.groups) <= len(other.groups) or self.groups[: len(other.groups)] != other.groups:
            return False
        return replace(self, groups=other.groups) == other

    def model_config(self, group: RunGroup, width: int, r: int) -> ModelConfig:
        """The validated ModelConfig of one run (template ← group overrides ← width, r, bptt_k)."""
        data = {**self.model, **group.model, "width": width, "r": r, "bptt_k": group.bptt_k(r)}
        return from_dict(ModelConfig, data, f"group {group.name!r}, width {width}, r={r}: model")


def _refuse_owned_train_keys(where: str, train: dict[str, Any]) -> None:
    owned = sorted(set(train) & set(SWEEP_OWNED_TRAIN_KEYS))
    if owned:
        raise UserError(
            f"{where}: train may not set {', '.join(owned)}; the sweep sets them per run "
            "(use batch_tokens, seeds, model and the grid)"
        )


def load_spec(path: str | Path) -> SweepSpec:
    """Read a sweep YAML file; malformed YAML, unknown keys and impossible grids are one-line UserErrors."""
    return from_dict(SweepSpec, load_yaml(path), f"{Path(path).name}")
