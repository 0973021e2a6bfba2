"""The benchmark scripts' own checks: --torch is refused at once where PyTorch's side cannot
run, not after minutes of Destiny's (it ended in a traceback); so is a comparison that would
measure nothing."""

from __future__ import annotations

import importlib
import importlib.util
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
