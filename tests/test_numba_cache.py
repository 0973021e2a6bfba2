"""The numba cache directory follows the kernels' source (destiny/_numba_cache.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from destiny import _numba_cache as nc

from . import without_root


def fake_package(root):
    pkg = root / "destiny"
    (pkg / "kernels" / "cpu").mkdir(parents=True)
    (pkg / "kernels" / "unit.py").write_text("def f(z):\n    return z\n")
    (pkg / "kernels" / "cpu" / "loss.py").write_text("from numba import njit\n")
    (pkg / "io").mkdir()
    (pkg / "io" / "scan.py").write_text("import numba\n")
    (pkg / "cli.py").write_text("print('no compiled code here')\n")
    return pkg


def test_an_edit_to_a_helper_module_moves_the_cache_and_drops_the_old_one(tmp_path):
    pkg = fake_package(tmp_path)
    first = nc.choose_cache_dir(pkg, {})
    assert first.startswith(str(pkg / "__pycache__" / nc.PREFIX))
    assert nc.choose_cache_dir(pkg, {}) == first  # same source, same cache
    (pkg / "cli.py").write_text("print('edited: no compiled code here either')\n")
    assert nc.choose_cache_dir(pkg, {}) == first
    # The bug this prevents: a kernel's cache was kept when only the helper it calls changed.
    (pkg / "kernels" / "unit.py").write_text("def f(z):\n    return z if z == z else z\n")
    second = nc.choose_cache_dir(pkg, {})
    assert second != first
    assert not os.path.exists(first) and os.path.isdir(second)
    (pkg / "io" / "scan.py").write_text("import numba  # a module outside kernels/ too\n")
    assert nc.choose_cache_dir(pkg, {}) != second


def test_the_users_choice_is_kept_and_a_read_only_install_uses_the_user_cache(tmp_path):
    pkg = fake_package(tmp_path)
    assert nc.choose_cache_dir(pkg, {"NUMBA_CACHE_DIR": "/somewhere"}) is None
    # (set but empty: numba's own choice, beside each file, were Destiny to leave it so)
    assert nc.PREFIX in nc.choose_cache_dir(pkg, {"NUMBA_CACHE_DIR": ""})
    # A read-only install: its __pycache__ holds no cache for this source (the call above
    # made one, which would be chosen), and no one but root may add one.
    shutil.rmtree(pkg / "__pycache__")
    (pkg / "__pycache__").mkdir(0o500)
    try:  # (in a process without root's file access overrides: root writes whatever the mode)
        done = without_root.run_python(
            "import pathlib, sys\nfrom destiny import _numba_cache as nc\n"
            "print(nc.choose_cache_dir(pathlib.Path(sys.argv[1]),\n"
            "                          {'XDG_CACHE_HOME': sys.argv[2]}))",
            str(pkg), str(tmp_path / "xdg"))
    finally:
        os.chmod(pkg / "__pycache__", 0o700)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(tmp_path / "xdg" / "destiny" / nc.PREFIX)), done.stdout
    assert os.listdir(pkg / "__pycache__") == []


def test_a_cache_directory_the_user_cannot_write_is_passed_over(tmp_path, monkeypatch):
    """A system-wide install whose cache directory for this source was made by whoever
    installed it (`sudo pip install`, then a first run as root): another user cannot write
    there, so the user's cache directory (XDG_CACHE_HOME as the caller gives it) is used.
    (os.access answers here as for that user: root's would say writable.)"""
    pkg = fake_package(tmp_path)
    name = nc.PREFIX + nc.source_digest(pkg)
    (pkg / "__pycache__" / name).mkdir(parents=True)
    access = os.access
    monkeypatch.setattr(nc.os, "access", lambda path, mode: (
        not str(path).startswith(str(pkg / "__pycache__")) and access(path, mode)))
    chosen = nc.choose_cache_dir(pkg, {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert chosen == str(tmp_path / "xdg" / "destiny" / name) and os.path.isdir(chosen)


def test_numba_compiles_into_the_chosen_directory():
    code = ("import destiny, os, numba.core.config as c; "
            "print(os.environ['NUMBA_CACHE_DIR'] == c.CACHE_DIR, c.CACHE_DIR)")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "True" and nc.PREFIX in out[1]


def test_the_user_cache_drops_directories_unused_for_a_month_and_keeps_the_others(
        tmp_path, monkeypatch):
    """Installs sharing the user's cache directory: each run marks its own directory, and one
    no run has marked for UNUSED_DAYS (an upgraded or removed install's) is removed."""
    pkg = fake_package(tmp_path)
    access = os.access
    monkeypatch.setattr(nc.os, "access", lambda path, mode: (
        not str(path).startswith(str(pkg / "__pycache__")) and access(path, mode)))
    cache = tmp_path / "xdg" / "destiny"
    day = 86400
    now = time.time()
    ages = {"numba-old": nc.UNUSED_DAYS + 1, "numba-recent": nc.UNUSED_DAYS - 1,
            "not-numba": 400}  # (not Destiny's: left alone)
    for name, days in ages.items():
        (cache / name / "sub").mkdir(parents=True)
        os.utime(cache / name, (now - days * day, now - days * day))
    ours = cache / (nc.PREFIX + nc.source_digest(pkg))
    ours.mkdir()
    os.utime(ours, (now - 400 * day, now - 400 * day))  # ours, last used long ago
    chosen = nc.choose_cache_dir(pkg, {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert chosen == str(ours)
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        ["numba-recent", "not-numba", ours.name])
    assert now - 60 < ours.stat().st_mtime  # marked as used: another install keeps it
    # A month later, without a run of the install that owns numba-recent:
    nc._prune_unused(ours, now=now + 2 * day)
    assert sorted(p.name for p in cache.iterdir()) == sorted(["not-numba", ours.name])
