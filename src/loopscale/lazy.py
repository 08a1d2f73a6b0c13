"""Package attributes that load their submodule on first use (PEP 562).

A package ``__init__`` that re-exports its submodules' names eagerly makes every ``from loopscale.pkg.sub
import x`` pay for all of them (``loopscale.fit`` would load SciPy and matplotlib to read a CSV). With
``__getattr__, __dir__ = lazy_exports(__name__, {"name": "submodule", ...})`` each name loads only its own
submodule, when it is first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, sources: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``; ``sources`` maps each public name to the
    submodule (relative to ``package``) that defines it."""

    def __getattr__(name: str) -> object:  # noqa: N807 - the module hook of PEP 562
        if name in sources:
            return getattr(importlib.import_module(f"{package}.{sources[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(vars(importlib.import_module(package))) | set(sources))

    return __getattr__, __dir__
