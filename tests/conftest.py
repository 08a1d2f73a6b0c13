"""Shared by every test: progress bars off (``LOOPSCALE_PROGRESS=0``), so what a command prints to stderr
does not depend on how fast this machine is; tests/test_progress.py turns them on where it checks them."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _no_progress_bars():
    # session scope: set before the module-scoped fixtures that run commands (e.g. tests/fit's `fitted`)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOOPSCALE_PROGRESS", "0")
        yield
