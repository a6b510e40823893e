"""Numerics shared by the reproducers: error measures and tolerances derived from a control.

A tolerance is never a guessed constant. Each check runs a *control* -- the same computation
where the answer is known to be right, in the same dtype (e.g. the reference path in bf16
against an fp64 reference) -- and lets the result under test sit at most ``K_NOISE`` times
the control's own error above the reference, and never below the dtype's unit roundoff
(``floor``): a control that happens to land on zero error must not make the check demand
exactness.

Works on anything with torch's tensor methods (``double``, ``norm``, ``abs``, ``max``).
"""

from __future__ import annotations

K_NOISE = 4.0  # a result may sit this many times above its control's error
BF16_FLOOR = 2.0**-8  # bf16 unit roundoff: the smallest bf16 tolerance ever used


def rel_fro(a, ref) -> float:
    """Relative Frobenius error ||a - ref|| / ||ref||, in float64 (a zero reference divides by 1e-300)."""
    a, ref = a.double(), ref.double()
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def max_abs(a, ref) -> float:
    """Largest absolute elementwise difference, in float64."""
    return (a.double() - ref.double()).abs().max().item()


def tolerance(control: float, floor: float, k: float = K_NOISE) -> float:
    """The most a result may be off: ``k`` times the control's error, at least ``floor``."""
    if control != control or control < 0:  # NaN or negative: the control itself is broken
        raise ValueError(f"control error {control!r} is not a non-negative number")
    return max(k * control, floor)
