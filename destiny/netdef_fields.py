"""Vocabulary of DSSTNE's JSON network definitions: enums, accepted spellings, typed readers.

`destiny.netdef` builds dataclasses from these pieces. Everything here follows DSSTNE's
parser (`LoadNeuralNetworkJSON` in `NNNetwork.cpp`), not `LDL.txt`, where the two differ
(spec section 10, item 10). Keys and enum string values are case-insensitive (spec 3.1).

The numeric enum values are the ones DSSTNE stores in network NetCDF files (spec section 11).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import IntEnum

from destiny.errors import NetDefError
from destiny.limits import MAX_INDEX
from destiny.wording import LONGEST, abridged, digits_abridged


class Activation(IntEnum):
    """Layer activation; values are ``layer<i>_activation`` in network files (spec 11)."""

    Sigmoid = 0
    Tanh = 1
    RectifiedLinear = 2
    Linear = 3
    ParametricRectifiedLinear = 4  # enum value exists, but DSSTNE cannot parse it (spec 3.3)
    SoftPlus = 5
    SoftSign = 6
    SoftMax = 7
    RELUMax = 8
    LinearMax = 9
    ExponentialLinear = 10
    LeakyRectifiedLinear = 11
    ScaledExponentialLinear = 12


class ErrorFunction(IntEnum):
    """Network loss; values are the global ``errorFunction`` attribute (spec 11)."""

    L1 = 0
    L2 = 1
    CrossEntropy = 2
    ScaledMarginalCrossEntropy = 3
    DataScaledMarginalCrossEntropy = 4
    Hinge = 5
    L2Hinge = 6


class WeightInit(IntEnum):
    """Weight initialisation scheme; values are ``layer<i>_weightInit`` (spec 11, formulas 3.7)."""

    Xavier = 0
    CaffeXavier = 1
    Gaussian = 2
    Uniform = 3
    UnitBall = 4
    Constant = 5
    SELU = 6


class NetworkKind(IntEnum):
    """Top-level ``Kind``; stored only, no behavioural difference (spec 3.2)."""

    FeedForward = 0
    AutoEncoder = 1


class LayerKind(IntEnum):
    """``layer<i>_kind`` (spec 11)."""

    Input = 0
    Hidden = 1
    Output = 2
    Target = 3


class LayerType(IntEnum):
    """``layer<i>_type`` (spec 11)."""

    FullyConnected = 0
    Convolutional = 1
    Pooling = 2


# Layer attribute bits, ``layer<i>_attributes`` (spec 11).
LAYER_ATTR_SPARSE = 1
LAYER_ATTR_DENOISING = 2
LAYER_ATTR_BATCH_NORMALIZATION = 4

# DSSTNE's NN_VERSION: the default `Version` (spec 3.2), and the `version` attribute every
# network file is written with (spec 4.1).
NN_VERSION = 0.9
MIN_VERSION = 0.6999  # DSSTNE's cutoff: a Version below this is an error (spec 3.2)
MAX_SOURCES = 4  # "Too many input layers" beyond this (spec 3.4)

# Lower-cased JSON spelling -> enum member. Aliases are those DSSTNE's parser accepts.
ACTIVATION_NAMES = {
    "sigmoid": Activation.Sigmoid,
    "tanh": Activation.Tanh,
    "linear": Activation.Linear,
    "relu": Activation.RectifiedLinear,
    "rectifiedlinear": Activation.RectifiedLinear,
    "lrelu": Activation.LeakyRectifiedLinear,
    "leakyrectifiedlinear": Activation.LeakyRectifiedLinear,
    "elu": Activation.ExponentialLinear,
    "exponentiallinear": Activation.ExponentialLinear,
    "selu": Activation.ScaledExponentialLinear,
    "scaledexponentiallinear": Activation.ScaledExponentialLinear,
    "softmax": Activation.SoftMax,
    # DSSTNE parses SoftPlus and SoftSign but runs them as a silent identity with no output
    # delta (quirk 10.12). Destiny accepts them because it implements them properly instead.
    "softplus": Activation.SoftPlus,
    "softsign": Activation.SoftSign,
}

# Spellings refused with an explanation instead of "unknown".
ACTIVATION_REFUSED = {
    "relumax": "DSSTNE runs RELUMax as a silent identity with no output delta (spec quirk 10.12); "
    "Destiny does not support it",
    "linearmax": "DSSTNE runs LinearMax as a silent identity with no output delta (spec quirk "
    "10.12); Destiny does not support it",
    "prelu": "DSSTNE's parser rejects PRelu (LDL.txt lists it, spec 10.10); Destiny does not "
    "support it",
    "parametricrectifiedlinear": "DSSTNE cannot parse ParametricRectifiedLinear (spec 11); "
    "Destiny does not support it",
    "maxout": "DSSTNE's parser rejects the MaxOut activation (spec 10.10); Destiny does not "
    "support it",
}

ERROR_FUNCTION_NAMES = {
    "l1": ErrorFunction.L1,
    "l2": ErrorFunction.L2,
    "l2hinge": ErrorFunction.L2Hinge,
    "hinge": ErrorFunction.Hinge,
    "crossentropy": ErrorFunction.CrossEntropy,
    "cross entropy": ErrorFunction.CrossEntropy,
    "scaledmarginalcrossentropy": ErrorFunction.ScaledMarginalCrossEntropy,
    "datascaledmarginalcrossentropy": ErrorFunction.DataScaledMarginalCrossEntropy,
}
ERROR_FUNCTION_REFUSED = {
    "smce": "LDL.txt's SMCE alias is rejected by DSSTNE's parser (spec 10.10); write "
    "ScaledMarginalCrossEntropy",
}

WEIGHT_INIT_NAMES = {m.name.lower(): m for m in WeightInit}
NETWORK_KIND_NAMES = {m.name.lower(): m for m in NetworkKind}
LAYER_KIND_NAMES = {m.name.lower(): m for m in LayerKind}
LAYER_TYPE_NAMES = {m.name.lower(): m for m in LayerType}

# Top-level keys: lower-cased spelling -> canonical DSSTNE spelling (spec 3.2).
TOP_KEYS = {
    k.lower(): k
    for k in (
        "Version", "Name", "Kind", "WeightsData", "LRN", "Maxout", "SparsenessPenalty",
        "Denoising", "DeltaBoost", "ScaledMarginalCrossEntropy", "ShuffleIndices", "RELUSlope",
        "ELUAlpha", "SELULambda", "Decay", "ErrorFunction", "Layers",
    )
}
TOP_KEYS["localresponsenormalization"] = "LRN"
# Both keys fill the same four parameters (spec 3.2).
TOP_KEYS["datascaledmarginalcrossentropy"] = "ScaledMarginalCrossEntropy"
TOP_KEYS["slope"] = "RELUSlope"

# Per-layer keys and the kinds that accept them (spec 3.3 table).
_I, _H, _O, _T = LayerKind.Input, LayerKind.Hidden, LayerKind.Output, LayerKind.Target
_ALL = frozenset(LayerKind)
_HO = frozenset((_H, _O))
LAYER_KEY_KINDS = {
    "Kind": _ALL, "Type": _ALL, "Name": _ALL, "Sparse": _ALL, "N": _ALL, "pDropout": _ALL,
    "Source": frozenset((_H, _O, _T)), "Kernel": frozenset((_H, _O, _T)),
    "KernelStride": frozenset((_H, _O, _T)), "BatchNormalization": frozenset((_H,)),
    "SparsenessPenalty": frozenset((_H,)), "Function": _HO, "Skip": _HO, "Activation": _HO,
    "RELUSlope": _HO, "ELUAlpha": _HO, "SELULambda": _HO, "WeightNorm": _HO,
    "DeltaNorm": _HO, "WeightInit": _HO, "SharedWeights": _HO, "DataSet": frozenset((_I, _O)),
}
LAYER_KEYS = {k.lower(): k for k in LAYER_KEY_KINDS}
LAYER_KEYS["slope"] = "RELUSlope"

# Hints for keys that LDL.txt documents but the parser rejects (spec 3.3, 10.10).
KEY_HINTS = {
    "weightdata": "DSSTNE's parser spells it WeightsData",
    "transpose": "the SharedWeights key is Transposed",
    "errorfunction": "ErrorFunction is a network-level key",
    "l1penalty": "DSSTNE's parser rejects L1Penalty",
    "recurrent": "DSSTNE's parser rejects Recurrent; Destiny does not support recurrent layers",
    "target": "DSSTNE's parser rejects a Target field",
}


@dataclass(frozen=True)
class Range:
    """The values a numeric setting may take: 0 up to ``high`` (none: no upper bound).

    One rule serves both readers of a setting: the JSON parser (``check_range``, whose error
    names the JSON path) and the network-file reader (``Getter.ranged`` in
    ``io/network_checks.py``, whose error names the file and the attribute), so that a file
    is held to the range its definition was, and both say what is expected in the same words.
    """

    what: str  # the noun of the message: "a probability", "a number"
    high: float | None = None
    high_open: bool = False  # (high itself excluded)
    note: str = ""  # what the range follows from, or what the value 0 means

    def holds(self, value: float) -> bool:
        if self.high is None:
            return value >= 0.0
        return 0.0 <= value and (value < self.high if self.high_open else value <= self.high)

    @property
    def expected(self) -> str:
        """What a message says is expected: ``a probability in [0, 1) (...)``."""
        span = (", 0 or more" if self.high is None
                else f" in [0, {self.high:g}{')' if self.high_open else ']'}")
        return f"{self.what}{span}" + (f" ({self.note})" if self.note else "")


# The ranges of settings: what each value means in DSSTNE bounds it, and Destiny refuses the
# rest up front rather than train on it (a pDropout of 1 scales kept units by 1/(1 - p)).
DROPOUT = Range("a probability", 1.0, high_open=True,  # (spec 3.8)
                note="dropout keeps a unit with probability 1 - pDropout")
DENOISING_P = Range("a probability", 1.0, high_open=True,  # (spec 3.9, scaled as dropout)
                    note="denoising drops an input with probability p")
PENALTY_P = Range("a target activation", 1.0)  # (the mean activation aimed at, spec 3.10)
PENALTY_BETA = Range("a number", note="0: no penalty")  # (enabled iff beta > 0, spec 3.2)
NORM = Range("a number", note="0: none")  # WeightNorm, DeltaNorm (0: off, spec 3.3, 3.13)
# Decay: DSSTNE takes Decay <= 0 as no decay (spec 5.2); a definition is refused a negative
# one as a likely typo, but a network file (DSSTNE's may hold one) is read as DSSTNE reads it.
DECAY = Range("a number", note="0: no decay")
# The Gaussian scheme's Scale is the deviation of its normal draw (spec 3.7); the other schemes
# scale a draw or a constant, where a negative Scale mirrors it.
GAUSSIAN_SCALE = Range("a standard deviation",
                       note="the Gaussian scheme draws each weight from N(0, Scale squared)")


def _describe(value) -> str:
    """Name a JSON value's type for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return f"{'-' if value < 0 else ''}Infinity (or a number beyond float64's range)"
    if isinstance(value, int) and len(digits := str(abs(value))) > LONGEST:
        return f"a number of {len(digits):,} digits ({'-' if value < 0 else ''}{digits[:6]}...)"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({abridged(value)})"
    if isinstance(value, list):
        return "an array"
    return "an object"


def fold_keys(obj, path: str, keys: dict[str, str], what: str) -> dict[str, tuple[str, object]]:
    """Check an object's keys case-insensitively; map canonical key -> (written key, value).

    Unknown keys are fatal, as in DSSTNE (spec 3.1). A key given twice (two spellings or two
    aliases) is refused, since DSSTNE would silently keep one of them.
    """
    if not isinstance(obj, dict):
        raise NetDefError(path, f"expected {what} object, got {_describe(obj)}")
    out: dict[str, tuple[str, object]] = {}
    for written, value in obj.items():
        canonical = keys.get(written.lower())
        key_path = sub_path(path, written)
        if canonical is None:
            hint = KEY_HINTS.get(written.lower())
            allowed = ", ".join(dict.fromkeys(keys.values()))
            extra = f" ({hint})" if hint else ""
            raise NetDefError(key_path, f"unknown key{extra}; expected one of {allowed}")
        if canonical in out:
            raise NetDefError(key_path, f"given twice (also as '{out[canonical][0]}')")
        if written in getattr(obj, "given_twice", ()):
            raise NetDefError(key_path, "given twice; a JSON reader keeps one of them "
                                        "silently. Keep the one meant.")
        out[canonical] = (written, value)
    return out


def sub_path(path: str, written: str) -> str:
    """JSON path of a key inside the object at `path` (`$` is the document root)."""
    return written if path == "$" else f"{path}.{written}"


def read_number(path: str, value) -> float:
    """A finite JSON number (booleans are not numbers here). Python's json reads NaN,
    Infinity and numbers beyond float64 (1e999) as non-finite floats: refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NetDefError(path, f"expected a number, got {_describe(value)}")
    try:
        number = float(value)
    except OverflowError:  # (an integer of hundreds of digits: json reads it exactly)
        number = math.inf
    if not math.isfinite(number):
        raise NetDefError(path, f"expected a finite number, got {_describe(value)}")
    return number


def as_float32(number: float) -> float:
    """``number`` rounded to float32, the precision in which DSSTNE holds a definition's
    parameters (NNFloat) and network files store them (spec 4.1): a run trains with the
    values its network file keeps, and compares as DSSTNE does (an output above float32(0.1),
    SMCE's zeroTarget, spec 5.5). OverflowError beyond float32's range."""
    rounded = struct.unpack("f", struct.pack("f", number))[0]
    if math.isinf(rounded) and not math.isinf(number):  # (struct packs 1e39 as inf)
        raise OverflowError(f"{number!r} is beyond float32's range")
    return rounded


def read_float(path: str, value) -> float:
    """A JSON number (``read_number``), rounded to float32 (``as_float32``)."""
    number = read_number(path, value)
    try:
        return as_float32(number)
    except OverflowError:
        raise NetDefError(path, f"{number:g} is beyond float32's range (3.4e38 either way), "
                                "the precision in which DSSTNE and network files hold it; "
                                "expected a number within it") from None


def read_bool(path: str, value) -> bool:
    """A JSON boolean, or the number 0 or 1: DSSTNE reads these keys with jsoncpp's asBool,
    which takes numbers, so definitions written for it may say ``"Sparse": 1``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise NetDefError(path, f"expected true or false (or 0 or 1), got {_describe(value)}")


def read_str(path: str, value) -> str:
    """A JSON string that a network file can hold: NetCDF stores text as UTF-8 and ends it at
    a NUL, so a lone surrogate escape ("\\ud800") failed only as the trained network was
    written, and a NUL was dropped from the name."""
    if not isinstance(value, str):
        raise NetDefError(path, f"expected a string, got {_describe(value)}")
    if "\0" in value:
        raise NetDefError(path, f"{abridged(value)} holds a NUL character, which a network file "
                                "cannot store; remove it.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NetDefError(path, f"{abridged(value)} holds half of a UTF-16 surrogate pair "
                                f"({value[exc.start]!r} escaped alone), which is not a "
                                "character and cannot be written as UTF-8; write the "
                                "character itself, or both halves of the pair.") from None
    return value


def read_names(path: str, value) -> tuple[str, ...]:
    """A layer name or an array of layer names (Source, Skip; spec 3.3)."""
    if isinstance(value, str):
        return (read_str(path, value),)
    if not isinstance(value, list):
        raise NetDefError(path, f"expected a layer name or an array of names, got "
                                f"{_describe(value)}")
    return tuple(read_str(f"{path}[{i}]", v) for i, v in enumerate(value))


def read_enum(path: str, value, names: dict, refused: dict | None = None):
    """Look up a case-insensitive enum spelling; the error lists every accepted spelling."""
    text = read_str(path, value)
    key = text.lower()
    if refused and key in refused:
        raise NetDefError(path, f"{abridged(text)} is not supported: {refused[key]}")
    if key not in names:
        expected = ", ".join(m.name for m in sorted(set(names.values())))
        aliases = sorted(k for k, m in names.items() if k != m.name.lower())
        alias_text = f" (aliases: {', '.join(aliases)})" if aliases else ""
        raise NetDefError(path, f"unknown {abridged(text)}; expected one of {expected}{alias_text}")
    return names[key]


# --- readers shared by the network and layer parsers (destiny.netdef) ---

def params_reader(cls, fields: dict[str, str]):
    """Reader for an object of numbers, e.g. {"p": .., "beta": ..} -> cls(p=.., beta=..)."""
    keys = {json_key.lower(): json_key for json_key in fields}

    def read(path: str, value):
        found = fold_keys(value, path, keys, "a parameter")
        args = {fields[k]: read_float(f"{path}.{w}", v) for k, (w, v) in found.items()}
        return cls(**args)
    return read


def check_range(path: str, value: float, rule: Range) -> float:
    """``value`` if ``rule`` holds for it; else the error at JSON path ``path``."""
    if not rule.holds(value):
        raise NetDefError(path, f"{shown_float(value)} is out of range; expected "
                                f"{rule.expected}")
    return value


def shown_float(value: float) -> str:
    """``value`` as a message shows it: a float32 value with the fewest digits that read
    back to it (-0.3, where its float64 repr is -0.30000001192092896)."""
    if math.isfinite(value) and as_float32(value) == value:
        for digits in range(1, 10):
            text = f"{value:.{digits}g}"
            if as_float32(float(text)) == value:
                return repr(float(text))
    return repr(value)


def ranged_reader(rule: Range):
    """Reader of a JSON number in ``rule``'s range (pDropout, WeightNorm, Decay, ...), as
    float32 (``read_float``): the range holds for the value the run uses."""
    def read(path: str, value) -> float:
        number = check_range(path, read_number(path, value), rule)
        rounded = read_float(path, number)
        if not rule.holds(rounded):  # (0.99999999 is 1 as float32)
            raise NetDefError(path, f"{number!r} is {rounded!r} as float32, the precision in "
                                    f"which DSSTNE and network files hold it, which is out of "
                                    f"range; expected {rule.expected}")
        return rounded
    return read


def setter(name, reader):
    def apply(kw, path, value):
        kw[name] = reader(path, value)
    return apply


def read_n(kw, path, value) -> None:
    if isinstance(value, str) and value.lower() == "auto":
        kw["n"], kw["n_auto"] = None, True
        return
    if isinstance(value, list):
        if not value:
            raise NetDefError(path, "expected a positive integer or 'auto', got an empty array")
        if len(value) != 1:
            raise NetDefError(path, "multi-dimensional layers (an array of 2-4 sizes) are not "
                                    "supported by Destiny; expected a positive integer or "
                                    "'auto'")
        path, value = f"{path}[0]", value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 < value < math.inf) or (isinstance(value, float) and not value.is_integer()):
        raise NetDefError(path, f"expected a positive integer or 'auto', got {_describe(value)}")
    if value > MAX_INDEX:  # (2**62 ended in NumPy's traceback as the weights were made)
        units = int(value)
        if len(str(units)) > LONGEST:
            units = digits_abridged(str(units))
        raise NetDefError(path, f"{units} units is more than Destiny holds in a layer (at "
                                f"most {MAX_INDEX:,}, as a dataset's width: unit indices are "
                                "int32)")
    kw["n"], kw["n_auto"] = int(value), False
