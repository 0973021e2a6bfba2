"""Integer codes the pointwise and loss kernels take, with DSSTNE's enum values (spec 11).

Kernels take plain ``int`` codes rather than enum objects so that numba can freeze them as
compile-time constants and the CUDA kernels can take them as scalars. The values equal
``destiny.netdef_fields.Activation`` / ``ErrorFunction``, so ``int(layer.activation)`` may be
passed straight through.
"""

from __future__ import annotations

# Activations (``layer<i>_activation``). 4 (PReLU), 8 (RELUMax) and 9 (LinearMax) exist in DSSTNE's
# enum but have no kernel there (identity stubs, spec 3.6); Destiny has none either.
SIGMOID = 0
TANH = 1
RELU = 2
LINEAR = 3
SOFTPLUS = 5
SOFTSIGN = 6
SOFTMAX = 7
ELU = 10
LRELU = 11
SELU = 12

# Error functions (the network's ``errorFunction``).
L1 = 0
L2 = 1
CROSS_ENTROPY = 2
SMCE = 3  # ScaledMarginalCrossEntropy
DSMCE = 4  # DataScaledMarginalCrossEntropy
HINGE = 5
L2_HINGE = 6

ACTIVATION_NAMES = {
    SIGMOID: "Sigmoid", TANH: "Tanh", RELU: "RectifiedLinear", LINEAR: "Linear",
    SOFTPLUS: "SoftPlus", SOFTSIGN: "SoftSign", SOFTMAX: "SoftMax", ELU: "ExponentialLinear",
    LRELU: "LeakyRectifiedLinear", SELU: "ScaledExponentialLinear",
}

ERROR_FUNCTION_NAMES = {
    L1: "L1", L2: "L2", CROSS_ENTROPY: "CrossEntropy", SMCE: "ScaledMarginalCrossEntropy",
    DSMCE: "DataScaledMarginalCrossEntropy", HINGE: "Hinge", L2_HINGE: "L2Hinge",
}

# Output activations each loss accepts; a loss missing here accepts every activation.
# DSSTNE computes no CrossEntropy/SMCE delta for other activations and leaves the delta buffer
# stale (quirk 10.13); DSMCE only has a Sigmoid kernel (spec 5.5).
LOSS_ACTIVATIONS = {
    CROSS_ENTROPY: (SIGMOID, SOFTMAX),
    SMCE: (SIGMOID, SOFTMAX),
    DSMCE: (SIGMOID,),
}


def check_activation(act: int) -> None:
    """Raise ``ValueError`` unless ``act`` is an activation code with a kernel."""
    if act not in ACTIVATION_NAMES:
        known = ", ".join(f"{code} ({name})" for code, name in ACTIVATION_NAMES.items())
        raise ValueError(f"activation code {act!r} has no kernel; expected one of {known}")


def check_loss_activation(err_fn: int, act: int) -> None:
    """Raise ``ValueError`` unless the loss ``err_fn`` can train an output layer ``act``.

    CrossEntropy and ScaledMarginalCrossEntropy need a Sigmoid or SoftMax output, and
    DataScaledMarginalCrossEntropy a Sigmoid output (spec 3.6, 5.5, quirk 10.13). L1, L2,
    L2Hinge and Hinge work with every activation.
    """
    if err_fn not in ERROR_FUNCTION_NAMES:
        known = ", ".join(f"{code} ({name})" for code, name in ERROR_FUNCTION_NAMES.items())
        raise ValueError(f"error function code {err_fn!r} is unknown; expected one of {known}")
    check_activation(act)
    allowed = LOSS_ACTIVATIONS.get(err_fn)
    if allowed is not None and act not in allowed:
        names = " or ".join(ACTIVATION_NAMES[code] for code in allowed)
        raise ValueError(f"{ERROR_FUNCTION_NAMES[err_fn]} needs a {names} output layer, not "
                         f"{ACTIVATION_NAMES[act]}; change the output activation or use L2")


def boost_applies(err_fn: int, act: int) -> bool:
    """Whether DeltaBoost multiplies the deltas of this (loss, activation) pair (spec 3.11).

    Only L1 (any activation), L2 and L2Hinge with Sigmoid, and CrossEntropy with Sigmoid.
    """
    return err_fn == L1 or (err_fn in (L2, L2_HINGE, CROSS_ENTROPY) and act == SIGMOID)


def is_monotone(act: int, slope: float, alpha: float, lam: float) -> bool:
    """Whether the activation never decreases as z grows, so that the best z give the best f(z).

    Every activation but SoftMax (a function of the whole row), with a LReLU slope, an ELU
    alpha and SELU's lambda and lambda * alpha not negative.
    """
    if act == SOFTMAX:
        return False
    if act == LRELU:
        return slope >= 0
    if act == ELU:
        return alpha >= 0
    if act == SELU:
        return lam >= 0 and lam * alpha >= 0
    return act in ACTIVATION_NAMES


def check_monotone(act: int, slope: float, alpha: float, lam: float) -> None:
    """Raise ``ValueError`` unless ``is_monotone``: what ``top_k_activated`` needs."""
    if not is_monotone(act, slope, alpha, lam):
        raise ValueError("top_k_activated needs a monotone non-decreasing activation "
                         "(codes.is_monotone); use activation_forward and top_k")
