"""The benchmark scripts' own checks: --torch is refused at once where PyTorch's side cannot
run, not after minutes of Destiny's (it ended in a traceback); so is a comparison that would
measure nothing."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.mark.parametrize("name", ["bench_train", "bench_predict"])
def test_torch_without_its_reference_or_pytorch_is_a_usage_error(name, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # (bench_predict imports bench_train)
    script, bench_train = importlib.import_module(name), importlib.import_module("bench_train")
    args = ["--torch", "--workdir", str(tmp_path)]
    monkeypatch.setattr(bench_train, "TORCH_REFERENCE", str(tmp_path / "absent.py"))
    result = CliRunner().invoke(script.main, args)
    assert result.exit_code == 2, result.output
    assert f"--torch: {tmp_path / 'absent.py'} does not exist" in result.output
    (tmp_path / "torch_reference.py").write_text("")
    monkeypatch.setattr(bench_train, "TORCH_REFERENCE", str(tmp_path / "torch_reference.py"))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda module, *a: None if module == "torch" else find_spec(module, *a))
    result = CliRunner().invoke(script.main, args)
    assert result.exit_code == 2 and "PyTorch is not installed" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["torch_reference.py"]  # (no data)


def test_tf32_products_on_the_cpu_are_a_usage_error(monkeypatch, tmp_path):
    """The cpu has no TF32: quality_sample printed float32's rows twice, the second pair
    labelled [tf32], after the hours of training."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    script = importlib.import_module("quality_sample")
    result = CliRunner().invoke(script.main, ["--products", "float32", "--products", "tf32",
                                              "--json", str(tmp_path / "q.json")])
    assert result.exit_code == 2, result.output
    assert "--products tf32 has no effect on the cpu backend" in result.output
    assert "--backend reference" in result.output and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, message", [
    # tracebacks once the split was made (ValueError, KeyError), after the recipes before
    (["--batch", "0"], "Invalid value for '--batch': 0 is not in the range x>=1"),
    (["--k", "0"], "Invalid value for '--k': 0 is not in the range x>=1"),
    (["--seed", "-1"], "Invalid value for '--seed': -1 is not in the range 0<="),
    (["--recipe", "default", "--recipe", "bogus"], "Invalid value for '--recipe': 'bogus': "
     "'bogus' is not an optimizer. A recipe is 'default' or an optimizer (sgd, momentum, "),
    (["--recipe", "adam alpha=abc"], "'adam alpha=abc': 'alpha=abc': 'abc' is not a finite "
     "number."),
    (["--recipe", "adam alpha=nan"], "'alpha=nan': 'nan' is not a finite number."),
    (["--recipe", "sgd alpha"], "'alpha' is not key=value with a key of batch, epochs, alpha"),
    (["--recipe", "sgd beta=2"], "'beta=2' is not key=value"),
    (["--recipe", "default batch=0"], "'batch=0' is out of range: batch is from 1 to"),
    (["--recipe", "default epochs=1.5"], "'epochs=1.5': '1.5' is not an integer."),
    # trained no epoch, without a word, and scored the untrained network
    (["--epochs", "0"], "Invalid value for '--epochs': 0 is not in the range x>=1"),
    # (the later --json wins: an unset variable in a script)
    (["--json", ""], "Invalid value for '--json': is an empty path"),
])
def test_quality_sample_refuses_bad_settings_before_the_work(monkeypatch, tmp_path, args,
                                                             message):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    script = importlib.import_module("quality_sample")
    result = CliRunner().invoke(script.main, ["--json", str(tmp_path / "q.json"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and list(tmp_path.iterdir()) == []


def test_quality_sample_names_its_own_flag_for_a_definition_it_cannot_read(monkeypatch,
                                                                           tmp_path):
    """The message said "check the -c path", a flag quality_sample does not have, and came
    once the split was made; a definition that is not one is refused before it too."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    script = importlib.import_module("quality_sample")
    missing = tmp_path / "missing.json"
    result = CliRunner().invoke(script.main, ["--config", str(missing),
                                              "--ratings", str(tmp_path / "no-ratings.csv")])
    assert result.exit_code == 1, result.output
    assert result.output == (f"Error: {missing}: cannot read the network definition: No such "
                             "file or directory; check the --config path\n")
    (tmp_path / "bad.json").write_text('{"Layers": 1}')
    result = CliRunner().invoke(script.main, ["--config", str(tmp_path / "bad.json"),
                                              "--ratings", str(tmp_path / "no-ratings.csv")])
    assert result.exit_code == 1 and "bad.json: Layers" in result.output, result.output


def test_quality_sample_reads_the_recipes_of_its_help(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    script = importlib.import_module("quality_sample")
    for recipe in ("default", "sgd", "adam alpha=0.003", "default seed=1", "adam alpha=1 mu=0.5 "
                   "batch=16 epochs=2 shuffle=true brake=false lam=0 lam1=1e-5 mu1=0.99"):
        assert script._recipe_problem(recipe) is None, recipe


def test_profile_steps_waits_differ_only_in_when_the_host_waits(monkeypatch, capsys):
    """--waits (a GPU measurement: what deciding the brake on the device could gain) times the
    same steps three ways; 'none' must not copy the loss back, 'step' must synchronize after
    each step, and the loss read is restored afterwards. Under the simulator, on a 4-unit
    copy of the benchmark network."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import count_launches
    import profile_step

    from destiny.io.dataset import SparseDataset
    from destiny.kernels import get_backend
    from destiny.kernels.cuda.loss import DeviceError
    from destiny.netdef import load_netdef
    from destiny.network import Network
    from destiny.train import TrainData, train_config

    items, batch, steps = 12, 4, 2
    narrow = count_launches.narrow_netdef(str(SCRIPTS.parent / "netdefs" / "benchmark.json"), 4)
    try:
        netdef = load_netdef(narrow, dataset_widths={"gl_input": items, "gl_output": items})
    finally:
        os.unlink(narrow)  # (a temporary file of the script's)
    kb = get_backend("gpu")
    net = Network(netdef, kb)
    indptr, indices = count_launches.synthetic(3 * batch, items)
    data = TrainData(net, {name: SparseDataset(name, items, indptr, indices)
                           for name in ("gl_input", "gl_output")})
    net.initialize(1)
    cfg = train_config("rmsprop", batch=batch)
    opt = cfg.optimizer_config()
    net.init_optimizer(opt)
    events = []
    read = DeviceError.__float__

    def counted(self):
        events.append("read")
        return read(self)

    monkeypatch.setattr(DeviceError, "__float__", counted)
    synchronize = kb.synchronize
    monkeypatch.setattr(kb, "synchronize", lambda: events.append("sync") or synchronize())
    update = net.update
    monkeypatch.setattr(net, "update", lambda *a: events.append("update") or update(*a))
    # (the simulator's syncthreads busy-wait for Python's switch interval: see tests/backends.py)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5e-5)
    try:
        profile_step.time_waits(profile_step.training_step(net, data, cfg, opt, batch), kb,
                                batch, steps, rounds=1)
    finally:
        sys.setswitchinterval(interval)
    step = ["read", "update", "sync"]
    assert events == (["sync", *step * steps, "sync"]                    # step
                      + ["sync", *["read", "update"] * steps, "sync"]    # loss
                      + ["sync", *["update"] * steps, "sync"])           # none
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "waiting step", "waiting loss", "waiting none"]
    assert all(f"(median of 1 windows of {steps} steps)" in line for line in lines)
    assert DeviceError.__float__ is counted  # (restored: later reads copy the loss again)
