"""What a network file read back must be, and the words for what it is not.

``network_file.py`` owns the layout (which attribute and variable holds what) and reads it;
this module judges what it read: each attribute as the type DSSTNE writes it (``Getter``),
Destiny's ``destiny_`` attributes and count variables, the finiteness of weights and biases,
and ``check_graph``'s errors told as the attributes they stand for. Each refusal names the file
and the attribute or variable, and says what to do (``DAMAGED``). Apart from the layout since
the checks outgrew it: the reader stays a map of the format, and the refusals of a damaged
network file are read, and worded, in one place.
"""

from __future__ import annotations

import json
import math
import re
from typing import Callable

import numpy as np

from destiny.errors import DataFormatError, NetDefError, netcdf_reads
from destiny.netdef import LayerKind, NetworkDef, parse_netdef
from destiny.netdef_fields import Range
from destiny.wording import counted, shown

# What to do about a network file whose attributes or values are wrong.
DAMAGED = ("The network file is damaged (or was not written by DSSTNE or Destiny): train "
           "the network again, or restore the file from a copy.")


class Getter:
    """The attributes of a network file, each read as the type DSSTNE writes it; a value of
    another type or out of range is a ``DataFormatError`` naming the file and the attribute."""

    def __init__(self, path, attrs):
        self.path, self.attrs = path, attrs

    def bad(self, key, expected: str) -> DataFormatError:
        return DataFormatError(self.path, f"the attribute {key!r} is "
                               f"{shown(self.attrs.get(key))}; expected {expected}. {DAMAGED}")

    def raw(self, key):
        if key not in self.attrs:
            raise DataFormatError(self.path, f"lacks the attribute {key!r} that every DSSTNE "
                                  f"network file has. {DAMAGED}")
        return self.attrs[key]

    def _number(self, key, expected: str):
        value = np.asarray(self.raw(key))
        if value.dtype.kind not in "iuf" or value.size != 1:
            raise self.bad(key, expected)
        return value.reshape(-1)[0].item()

    def uint(self, key, low: int = 0, expected: str | None = None) -> int:
        expected = expected or ("a whole number" if low == 0 else f"a whole number, {low} or more")
        value = self._number(key, expected)
        if not float(value).is_integer() or value < low:
            raise self.bad(key, expected)
        return int(value)

    def float(self, key, default=None) -> float:
        """A finite number: NaN or infinity in a network's setting is damage (DSSTNE's JSON
        parser reads no such value, nor does Destiny's)."""
        if default is not None and key not in self.attrs:
            return default
        value = float(self._number(key, "a number"))
        if not math.isfinite(value):
            raise self.bad(key, "a finite number")
        return value

    def ranged(self, key, rule: Range, default=None) -> float:
        """A finite number in ``rule``'s range: the one a JSON definition is held to for the
        same setting (netdef_fields), which a file must keep too."""
        value = self.float(key, default)
        if not rule.holds(value):
            raise self.bad(key, rule.expected)
        return value

    def text(self, key) -> str:
        value = self.raw(key)
        if not isinstance(value, str):
            raise self.bad(key, "text")
        return value

    def enum(self, key, kind):
        code = self.uint(key, expected=f"a code of {kind.__name__}")
        try:
            return kind(code)
        except ValueError:
            codes = ", ".join(f"{m.value} {m.name}" for m in kind)
            raise self.bad(key, f"a code of {kind.__name__} ({codes})") from None

    def json(self, key, check: Callable[[object], bool], expected: str):
        """Destiny's JSON text attribute ``key``, which ``check`` must accept."""
        text = self.text(key)
        try:
            value = json.loads(text)
        except ValueError:
            raise self.bad(key, f"JSON text of {expected}") from None
        if not check(value):
            raise self.bad(key, f"JSON text of {expected}")
        return value


def graph_error(get: Getter, layers, shared: dict[int, list[int]],
                 e: NetDefError) -> DataFormatError:
    """``check_graph``'s error in the file's terms: the attribute its JSON path stands for
    (``Layers[2].Source`` with ``item`` 1: ``layer2_source1``; a layer's ``SharedWeights[s]``:
    the attributes of the weight it came from)."""
    detail = re.sub(r"Layers\[(\d+)\]", r"layer \1 (the 'layer\1_' attributes)", e.detail)
    m = re.fullmatch(r"Layers\[(\d+)\]\.(\w+)(?:\[(\d+)\]\.(\w+))?", e.json_path)
    if m is None:  # ("Layers": no Input or no Output layer)
        kinds = ", ".join(f"{int(layer.kind)} {layer.kind.name}" for layer in layers)
        return DataFormatError(get.path, f"the attributes 'layer<i>_kind' are {kinds}: "
                               f"{detail}. {DAMAGED}")
    i, key = int(m[1]), m[2]
    if key == "SharedWeights":  # (InputLayer, SourceInputLayer, SourceOutputLayer)
        attribute = f"weight{shared[i][int(m[3])]}_{m[4][0].lower()}{m[4][1:]}"
    elif key in ("Source", "Skip"):
        attribute = f"layer{i}_{key.lower()}" + ("s" if e.item is None else str(e.item))
    else:  # (Name)
        attribute = f"layer{i}_{key[0].lower()}{key[1:]}"
    if attribute not in get.attrs:  # (a check added to check_graph since)
        return DataFormatError(get.path, f"the 'layer{i}_' attributes: {detail}. {DAMAGED}")
    return DataFormatError(get.path, f"the attribute {attribute!r} is "
                           f"{shown(get.attrs[attribute])}: {detail}. {DAMAGED}")


def check_destiny(get: Getter, netdef: NetworkDef) -> None:
    """Destiny's attributes that the commands read back (the training state a checkpoint
    resumes from, the feature indexes predict checks), where present, and the definition
    train embedded."""
    for key in ("destiny_epoch", "destiny_updates"):
        if key in get.attrs:
            get.uint(key)
    if "destiny_run_started" in get.attrs:
        get.float("destiny_run_started")  # (seconds since 1970)
    if "destiny_netdef_json" in get.attrs:
        _check_netdef_json(get, netdef)
    if "destiny_indexes" in get.attrs:
        get.json("destiny_indexes", _is_indexes,
                 "an object: layer name -> [entries, digest] of its feature index")
    if "destiny_settings" in get.attrs:
        get.json("destiny_settings", is_settings, "an object of the run's settings (config, "
                 "netdef, examples, entries, indexes)")
        for key in ("destiny_epoch", "destiny_updates"):  # (what --resume goes on from)
            if key not in get.attrs:  # (Destiny's own: a DSSTNE file need not have it)
                raise DataFormatError(get.path, f"records the run's settings ('destiny_settings"
                                      f"', as train's checkpoints do) but lacks {key!r}, the "
                                      f"training state that goes with them. {DAMAGED}")


def _check_netdef_json(get: Getter, netdef: NetworkDef) -> None:
    """The JSON definition train was given (fit.py) must parse, and describe the layers the
    attributes do: a copy that disagrees was edited or damaged, and would mislead whoever
    reads the network's definition from it."""
    key = "destiny_netdef_json"
    data = get.json(key, lambda v: isinstance(v, dict), "an object: the network definition "
                    "train was given")
    try:  # ("N": "auto" is the width of the layer's dataset, as the file's layer has it: an
        #    auto layer's own, since another layer of the dataset may be wider, spec 3.4)
        parsed = parse_netdef(data)
        widths = {layer.dataset: layer.n for layer in netdef.layers}
        widths.update((mine.dataset, theirs.n) for mine, theirs
                      in zip(parsed.layers, netdef.layers, strict=False) if mine.n_auto)
        copy = parsed.resolve(widths)
    except NetDefError as e:  # (damage, or a definition an earlier Destiny took)
        version = get.attrs.get("destiny_version")
        writer = f"Destiny {version}" if isinstance(version, str) else "another Destiny"
        raise DataFormatError(get.path, f"the attribute {key!r} holds a network definition "
                              f"that this Destiny does not accept ({e}); the file was written "
                              f"by {writer}, or altered. Predict with the Destiny that wrote "
                              "it, or train the network again.") from None
    mine, theirs = _outline(netdef), _outline(copy)
    if len(mine) != len(theirs):
        raise DataFormatError(get.path, f"the attribute {key!r} holds a definition of "
                              f"{counted(len(theirs), 'layer')}, and the attributes ('layers') "
                              f"describe {len(mine)}. {DAMAGED}")
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if a != b:
            raise DataFormatError(get.path, f"the attribute {key!r} holds a definition whose "
                                  f"layer {i} is {b}, and the attributes 'layer{i}_' describe "
                                  f"{a}. {DAMAGED}")


def _outline(netdef: NetworkDef) -> list[str]:
    """Each layer's name, kind, size, dataset, sources and skips, as a message says them."""
    def said(names) -> str:
        return ", ".join(map(repr, names)) or "none"

    return [f"{layer.name!r} ({layer.kind.name}, {counted(layer.n, 'unit')}, dataset "
            f"{layer.dataset!r}, sources {said(layer.sources)}, skips {said(layer.skips)})"
            for layer in netdef.layers]


# Destiny's counts (fit.py) of how often each output unit was a target and each input feature
# in an example: predict never recommends a unit counted 0 and leaves out such features.
_COUNTS = {"destiny_target_counts_": LayerKind.Output, "destiny_input_counts_": LayerKind.Input}


def check_counts(nc, path, netdef: NetworkDef, read: dict[str, np.ndarray]) -> None:
    """Every count variable names a layer of its kind and holds one whole number >= 0 per
    unit (those read): counts of a renamed or resized layer would be passed over unseen."""
    for name, var in nc.variables.items():
        prefix = next((p for p in _COUNTS if name.startswith(p)), None)
        if prefix is None:
            continue
        kind, layer_name = _COUNTS[prefix], name[len(prefix):]
        layer = next((lay for lay in netdef.layers if lay.name == layer_name), None)
        if layer is None or layer.kind != kind:
            have = ", ".join(repr(lay.name) for lay in netdef.layers_of(kind))
            raise DataFormatError(path, f"the variable {name!r} holds the counts of a layer "
                                  f"{layer_name!r}, and the network's {kind.name} layers are "
                                  f"{have}. {DAMAGED}")
        if var.size != layer.n:
            raise DataFormatError(path, f"the variable {name!r} holds {var.size:,} counts; the "
                                  f"layer {layer_name!r} has {counted(layer.n, 'unit')}. "
                                  f"{DAMAGED}")
        values = read.get(name[len("destiny_"):])
        if values is None:
            continue
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0)
                                   & (np.floor(values) == values)))
        if bad.size:
            raise DataFormatError(path, f"the variable {name!r} holds "
                                  f"{counted(bad.size, 'value')} that "
                                  f"{'is' if bad.size == 1 else 'are'} not a count (a whole "
                                  f"number, 0 or more), the first {shown(values[bad[0]])} for "
                                  f"unit {bad[0]:,}. {DAMAGED}")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_indexes(value) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, list) and len(v) == 2 and _is_count(v[0]) and isinstance(v[1], str)
        for v in value.values())


def is_settings(value) -> bool:
    """A checkpoint's ``destiny_settings`` as train records them (``fit.py``)."""
    return (isinstance(value, dict)
            and isinstance(value.get("config", {}), dict)
            and isinstance(value.get("netdef", ""), str)
            and isinstance(value.get("indexes", ""), str)
            and _is_count(value.get("examples", 0))
            and isinstance(value.get("entries", {}), dict)
            and all(_is_count(v) for v in value.get("entries", {}).values()))


def check_finite(path, name: str, values: np.ndarray, *, part: bool = False) -> None:
    """Refuse a weight or bias variable holding NaN or infinity (a damaged file, or a run that
    diverged): predict would write 'nan' scores, and training would go on from them.

    ``part``: ``values`` are a block of the variable ``name`` of ``path`` (a rank of a split
    network reads only its own). What a block holds is then told of the whole variable,
    counted through the file a block at a time: the message one process gives for the file.
    """
    bad, size = _non_finite(values), np.size(values)
    if bad and part:
        import netCDF4

        with netcdf_reads(path, f". {DAMAGED}"), netCDF4.Dataset(path, "r") as nc:
            var = nc.variables[name]
            var.set_auto_mask(False)
            step = 1 << 22
            size = var.size
            bad = sum(_non_finite(np.asarray(var[i:i + step])) for i in range(0, size, step))
    if bad:
        raise DataFormatError(path, f"the variable {name!r} holds {counted(bad, 'value')} that "
                              f"{'is' if bad == 1 else 'are'} not finite (NaN or infinity) "
                              f"among {size:,}. {DAMAGED}")


def _non_finite(values: np.ndarray) -> int:
    """How many values are NaN or infinite. One float32 sum of the values, which is finite
    only if they all are, costs about as much as reading them once and needs no temporary
    array; only a sum too large for float32 (not weights any training writes) is looked at
    value by value."""
    flat = np.asarray(values).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.add.reduce(flat, dtype=np.float32)):
            return 0
    step = 1 << 20
    return sum(int(flat[i:i + step].size - np.count_nonzero(np.isfinite(flat[i:i + step])))
               for i in range(0, flat.size, step))
