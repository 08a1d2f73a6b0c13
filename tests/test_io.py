"""Atomic writes: whole files only, and the mode a plain open() would give (umask respected)."""

from __future__ import annotations

import os
import stat

import pytest

from loopscale.io import atomic_write, atomic_write_json, atomic_write_text, remove_partial_writes


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_mode_follows_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = atomic_write_text(tmp_path / "a.txt", "x")
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o666 & ~umask


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    target = atomic_write_json(tmp_path / "r.json", {"a": 1})

    def boom(tmp: str) -> None:
        with open(tmp, "w") as fh:
            fh.write("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_text().strip().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_remove_partial_writes_removes_only_the_temporary_files_of_that_path(tmp_path):
    target = tmp_path / "eval.json"
    atomic_write_text(target, "{}")
    left = [tmp_path / ".eval.json.abc123.tmp", tmp_path / ".eval.json.x.tmp"]
    for tmp in left:
        tmp.write_text('{"half')
    other = tmp_path / ".result.json.abc.tmp"
    other.write_text("x")
    assert sorted(remove_partial_writes(target)) == sorted(left)
    assert target.read_text() == "{}" and other.exists() and not any(p.exists() for p in left)
