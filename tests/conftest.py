"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import pathlib
import signal
import sys

# Without an NVIDIA driver the CUDA kernels run in numba's simulator (every thread in Python,
# hence the tests' tiny shapes for them). numba reads this when it is first imported, so it
# must come before any import of numba; a machine with a GPU runs the kernels for real.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

# The commands a test starts run as a user's shell starts them: standard output to a pipe or
# a file block-buffered. PYTHONUNBUFFERED=1 (set on some machines, this one among them) hid
# a missing flush before a command dies by a signal, and a sys.stdout left in place after a
# failed write; the few tests that need it set it themselves.
os.environ.pop("PYTHONUNBUFFERED", None)

import pytest  # noqa: E402

# `make test` records every CUDA kernel launch's signature for scripts/cuda_compile_check.py;
# the recorder goes in before anything imports a kernel module.
SIGNATURES = os.environ.get("DESTINY_CUDA_SIGNATURES")
if SIGNATURES:
    from tests import cuda_signatures  # noqa: E402

    cuda_signatures.install()

from destiny import synthetic  # noqa: E402
from destiny.fit import fit  # noqa: E402
from destiny.generate import generate_netcdf  # noqa: E402
from destiny.train import train_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent

# A test that hangs (a run waiting for its own lock, a rank waiting for a message that never
# comes) fails after this long with its traceback, instead of holding CI until its own limit
# with no word of which test it was. The slowest test takes under a minute on 2 cores.
HANG_SECONDS = 300


@pytest.fixture(autouse=True)
def _fail_if_hung():
    def hung(signum, frame):  # (Failed is a BaseException: no `except Exception` swallows it)
        pytest.fail(f"still running after {HANG_SECONDS} s: hung?")

    previous = signal.signal(signal.SIGALRM, hung)  # (neither Destiny nor a test uses SIGALRM)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class RecordedBar:
    """Stands in for tqdm: what a command's progress bar was given (``progress_bars``)."""

    def __init__(self, bars: list, **kwargs):
        self.on_stderr = kwargs.pop("file") is sys.stderr  # (the runner's, while it runs)
        self.kwargs, self.updates, self.postfix, self.closed = kwargs, [], [], False
        bars.append(self)

    def set_postfix_str(self, text, refresh=True):
        self.postfix.append(text)

    def update(self, n):
        assert not self.closed
        self.updates.append(n)

    def close(self):
        self.closed = True


@pytest.fixture
def progress_bars(monkeypatch) -> list:
    """The progress bars (``RecordedBar``) the commands make during the test, in order."""
    import tqdm

    bars = []
    monkeypatch.setattr(tqdm, "tqdm", lambda **kwargs: RecordedBar(bars, **kwargs))
    return bars


def pytest_sessionfinish(session, exitstatus):
    if SIGNATURES:
        cuda_signatures.write(SIGNATURES)


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked ``gpu`` unless numba.cuda drives a real GPU (not the simulator)."""
    from destiny.kernels import cuda_available

    if any(item.get_closest_marker("gpu") for item in items) and not cuda_available():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (numba.cuda finds none)")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


def write_sample_data(d, *, users: int, items: int, mean_per_user: float, seed: int):
    """Synthetic ratings in ``d``: ratings.txt, gl_input.nc and gl_output.nc with their
    feature indices (features_input, features_output) and one sample index (samples)."""
    r = synthetic.generate_ratings(users=users, items=items, mean_per_user=mean_per_user,
                                   seed=seed)
    synthetic.write_ratings_dsstne(d / "ratings.txt", r)
    for side in ("input", "output"):
        generate_netcdf(input_path=d / "ratings.txt", output=d / f"gl_{side}.nc",
                        dataset_name=f"gl_{side}", feature_index=d / f"features_{side}",
                        sample_index=d / "samples", create=True)
    return d


@pytest.fixture(scope="session")
def model(tmp_path_factory):
    """A small model trained on synthetic data through the real pipeline."""
    d = write_sample_data(tmp_path_factory.mktemp("model"), users=300, items=90,
                          mean_per_user=8, seed=4)
    fit(config_path=ROOT / "netdefs" / "movielens.json", input_path=d / "gl_input.nc",
        output_path=d / "gl_output.nc", network_path=d / "gl.nc",
        cfg=train_config(batch=64, epochs=3), checkpoint_every=0)
    return d


def network_and_another(model, d) -> tuple[pathlib.Path, pathlib.Path]:
    """Copies of ``model``'s network in ``d``: gl.nc, and new.nc with another run's weights of
    the same layout, for a train --force renaming it over gl.nc as a reader reads that."""
    import shutil

    import netCDF4

    net, new = d / "gl.nc", d / "new.nc"
    shutil.copy(model / "gl.nc", net)
    shutil.copy(model / "gl.nc", new)
    with netCDF4.Dataset(new, "a") as nc:
        for k in (0, 1):
            nc.variables[f"weight{k}_weights"][:] = nc.variables[f"weight{k}_weights"][:] + 1
    return net, new
