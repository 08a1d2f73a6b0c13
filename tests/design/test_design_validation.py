"""The design's candidate grid and emitted groups go through the sweep spec's own validation: a NaN, infinite
or non-positive budget is one UserError naming the grid, never a crash in the planner's run names."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from loopscale import design as d
from loopscale.errors import UserError
from loopscale.sweep import preset


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1e12, 0.0])
def test_candidates_refuse_a_budget_that_is_not_a_positive_finite_number(bad):
    laptop = preset("laptop-staggered")
    with pytest.raises(UserError, match="budget must be a positive finite number of FLOPs"):
        d.candidates_from_spec(laptop, budgets=[bad, 2.5e12], widths=[16, 32, 48])


def test_candidates_refuse_a_repeated_width_of_the_reference_grid():
    laptop = preset("laptop-staggered")
    group = laptop.groups[0]
    cell = group.grid[0]
    # built without validation, as a library caller could: the design still refuses it
    twice = dataclasses.replace(cell, widths=[cell.widths[0], *cell.widths])
    spec = dataclasses.replace(laptop, groups=[dataclasses.replace(group, grid=[twice, *group.grid[1:]])])
    with pytest.raises(UserError, match="lists a width twice"):
        d.candidates_from_spec(spec)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_emitted_groups_refuse_a_non_finite_budget(bad):
    cands = d.candidates_from_spec(preset("laptop-staggered"))
    idx = np.arange(len(cands.runs))
    assert sum(len(c.widths) for g in d.design_groups(cands, idx, "main") for c in g.grid) > 0
    runs = [dataclasses.replace(cands.runs[0], budget=bad), *cands.runs[1:]]
    spoiled = dataclasses.replace(cands, runs=runs)
    with pytest.raises(UserError, match="budget must be a positive finite number of FLOPs"):
        d.design_groups(spoiled, idx, "main")
