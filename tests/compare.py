"""Tensor comparisons for the end-to-end checks (check_trainer.py, check_dist.py,
check_eval_app.py). A NaN must fail a comparison: `abs(g - r) > tol` is False for NaN and
Python's max() drops a NaN depending on where it sits, so both are written to fail on it."""
import numpy as np


def max_abs_diff(a, b):
    """Largest |a[k] - b[k]| over two dicts of arrays by name; inf if the names or a shape
    differ, or if any difference is not finite."""
    if a.keys() != b.keys():
        return float("inf")
    worst = 0.0
    for k in a:
        x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
        if x.shape != y.shape:
            return float("inf")
        d = np.abs(x - y)
        if not np.all(np.isfinite(d)):
            return float("inf")
        worst = max(worst, float(d.max(initial=0.0)))
    return worst


def outside(got, ref, allowed):
    """Elements of `got` not within `allowed` of `ref` (NaN anywhere counts as outside)."""
    return ~(np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64)) <= allowed)
