"""Recipes written outside loopscale (docs/recipes.md "Plugins").

A plugin is a ``RecipePlugin`` registered under the entry point group ``loopscale.recipes`` (or named as
``module:attr``). It may carry config overrides (the schedule, the optimiser's settings: ``key=value`` as
``--set`` takes them) and a *loop hook*: a module built once per model and called on the recurrent block's
input in every loop, ``u = hook(u, i)`` (``u`` [B, T, d], ``i`` the loop index from 0), its parameters routed
to one of the model's optimiser groups. A hook declares what it adds to the counts: ``params(cfg)``
parameters (counted in N_rec, with the other per-loop parameters) and ``loop_flops(cfg)`` forward FLOPs per
token in each loop (training charges it 3× in every back-propagated loop, as a weight is). ``price`` measures
both on the model before it trains anything (``loopscale.model.measure``) and refuses a declaration off by
more than 2%.

No torch here: accounting reads the declarations; only ``build_hook`` builds modules.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopscale.errors import UserError

ENTRY_POINT_GROUP = "loopscale.recipes"
OPTIM_GROUPS = ("matrix", "embed", "unembed", "norm", "hc", "injection")  # LoopedGPT.param_groups


@dataclass(frozen=True)
class RecipePlugin:
    """A recipe from outside loopscale (module docstring). ``build_hook(cfg)`` returns an ``nn.Module``
    called as ``hook(u, i)``; ``params`` and ``loop_flops`` are functions of the ``ModelConfig``."""

    name: str
    overrides: tuple[str, ...] = ()
    build_hook: Callable[[Any], Any] | None = None
    params: Callable[[Any], int] | None = None
    loop_flops: Callable[[Any], int] | None = None
    optim_group: str = "norm"

    def validate(self, ref: str) -> None:
        if self.build_hook is not None and (self.params is None or self.loop_flops is None):
            raise UserError(f"plugin {ref}: a loop hook must declare params(cfg) and loop_flops(cfg)")
        if self.optim_group not in OPTIM_GROUPS:
            raise UserError(f"plugin {ref}: optim_group must be one of {', '.join(OPTIM_GROUPS)}, got "
                            f"{self.optim_group!r}")
        if not self.overrides and self.build_hook is None:
            raise UserError(f"plugin {ref}: it changes nothing (no overrides, no loop hook)")


def installed_plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points of group ``loopscale.recipes`` by name (the one place plugins are discovered)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def load_plugin(ref: str) -> RecipePlugin:
    """The plugin an entry point name or ``module:attr`` names; anything else is a one-line UserError."""
    try:
        if ":" in ref:
            module, _, attr = ref.partition(":")
            obj = getattr(importlib.import_module(module), attr)
        else:
            found = installed_plugins().get(ref)
            if found is None:
                raise UserError(f"no recipe plugin {ref!r} is installed (entry points {ENTRY_POINT_GROUP})")
            obj = found.load()
    except UserError:
        raise
    except Exception as exc:  # an import error of someone else's module: one line, not its traceback
        raise UserError(f"plugin {ref}: cannot load it ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, RecipePlugin):
        raise UserError(f"plugin {ref}: expected a loopscale.plugins.RecipePlugin, got {type(obj).__name__}")
    obj.validate(ref)
    return obj


def plugin_ref(ref: str) -> str:
    """``module:attr`` of an entry point name (run configs record where the plugin is, so a run folder
    reproduces without the entry point), a ``module:attr`` as it is."""
    if ":" in ref:
        return ref
    found = installed_plugins().get(ref)
    if found is None:
        raise UserError(f"no recipe plugin {ref!r} is installed (entry point group {ENTRY_POINT_GROUP})")
    return found.value.replace(" ", "")


def plugin_overrides(ref: str) -> tuple[str, ...]:
    """The overrides of a plugin recipe: its own, and its loop hook as ``model.loop_hook=module:attr``."""
    plugin = load_plugin(ref)
    hook = (f"model.loop_hook={plugin_ref(ref)}",) if plugin.build_hook is not None else ()
    return (*plugin.overrides, *hook)


def hook_counts(cfg: Any) -> tuple[int, int]:
    """(parameters, forward FLOPs per token per loop) that the model's loop hook declares; (0, 0) without."""
    if cfg.loop_hook is None:
        return 0, 0
    plugin = load_plugin(cfg.loop_hook)
    return int(plugin.params(cfg)), int(plugin.loop_flops(cfg))
