"""``train`` as each process of test_train_gpu's jobs under the CUDA simulator runs it:
``python tests/simulated_train.py ARGS`` (or a case of tests/batch_worker.py naming it).

The simulator's launches are ~10x faster with a short thread switch interval (see
tests/backends.py); the ranks run in their own processes, so they need the simulator's
shared-array fix that tests/backends.py applies (without it, a block's threads can get
different shared arrays: one wrong prefix sum in the sparse gradient, one weight off, now and
then). Then the real command line.
"""

import pathlib
import sys

sys.setswitchinterval(5e-5)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import tests.backends  # noqa: E402, F401  (the simulator fix)
from destiny.cli.train import main  # noqa: E402

sys.argv[0] = "train"
main()
