#!/usr/bin/env python3
"""Apply a fedcalib calibrator file (fedcalib.calibrator/v1) with NumPy.

Written from docs/SIDECAR.md alone, as a serving stack outside Go would:
the tests run it against fedcalib's Go applier for every method,
weighting and input kind, so the document is the contract.

    python3 docs/sidecar_apply.py C.json rows.json out.json

rows.json holds a list of rows of C numbers: the model's logits, or its
probabilities when the file's provenance.input is "probabilities".
out.json receives the calibrated probabilities, one row each.
"""

import json
import sys

import numpy as np

FORMAT = "fedcalib.calibrator/v1"
FLOOR = 1e-12
BETA_EPS = 2.0 ** -52


def softmax(v):
    e = np.exp(v - np.max(v))
    return e / np.sum(e)


def log_softmax(v):
    m = np.max(v)
    return v - m - np.log(np.sum(np.exp(v - m)))


def softplus(x):
    x = np.asarray(x, dtype=np.float64)
    pos = x > 0
    out = np.empty_like(x)
    out[pos] = x[pos] + np.log1p(np.exp(-x[pos]))
    out[~pos] = np.log1p(np.exp(x[~pos]))
    return out


def sigmoid(u):
    u = np.asarray(u, dtype=np.float64)
    out = np.empty_like(u)
    pos = u >= 0
    out[pos] = 1 / (1 + np.exp(-u[pos]))
    e = np.exp(u[~pos])
    out[~pos] = e / (1 + e)
    return out


def relu(x):
    return np.maximum(x, 0.0)


def matrix(values, rows, cols):
    return np.asarray(values, dtype=np.float64).reshape(rows, cols)


def order_preserving(z, weights):
    """The order-preserving map; weights(y) gives the rank weights m."""
    c = len(z)
    order = sorted(range(c), key=lambda j: (-z[j], j))  # stable, descending
    y = z[order]
    m = weights(y)
    o = np.zeros(c)
    for k in range(c - 1):
        d = y[k] - y[k + 1]
        step = d * m[k] if d > 0 else 0.0
        o[k + 1] = o[k] - step
    p = softmax(o)
    out = np.empty(c)
    out[order] = p
    return out


def bin_index(v, bins):
    if v <= 0:
        return 0
    if v >= 1:
        return bins - 1
    return min(int(np.floor(v * bins)), bins - 1)


def normalise_or(g, fallback):
    s = np.sum(g)
    if not s > 0:
        return fallback.copy()
    return g / s


def first_max(v):
    return int(np.argmax(v))  # NumPy's argmax takes the first maximum


def binning(z, table, bins, params):
    c = len(z)
    p = softmax(z)
    table = np.asarray(table, dtype=np.float64)
    g = np.empty(c)
    for j in range(c):
        t = table[j * bins + bin_index(p[j], bins)]
        g[j] = p[j] if t < 0 else t
    return weighted(g, p, params)


def interpolate(x, y, v):
    """The exact isotonic map of one class (SIDECAR.md): v clipped to
    [x_0, x_last], then linear between the breakpoints, y_last at x_last;
    NumPy's interp, as scikit-learn's IsotonicRegression.predict."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    v = min(max(v, x[0]), x[-1])
    return float(np.interp(v, x, y))


def isotonic_exact(z, params):
    p = softmax(z)
    g = np.array([interpolate(params["x"][j], params["y"][j], p[j]) for j in range(len(z))])
    return weighted(g, p, params)


def weighted(g, p, params):
    weighting = params.get("weighting", "none") or "none"
    if weighting == "none":
        return normalise_or(g, p)
    alpha = np.asarray(params["alpha"], dtype=np.float64)
    if weighting == "changed":
        u = normalise_or(g, p)
        if first_max(u) == first_max(p):
            return u
    blended = alpha * g + (1 - alpha) * p
    return normalise_or(blended, p)


def calibrate_row(method, c, params, z):
    if method == "temp":
        return softmax(z / params["t"])
    if method == "vector":
        a = np.asarray(params["a"], dtype=np.float64)
        b = np.asarray(params["b"], dtype=np.float64)
        return softmax(a * z + b)
    if method == "matrix":
        return softmax(matrix(params["a"], c, c) @ z + np.asarray(params["b"]))
    if method == "dirichlet":
        # log-probabilities clamped from below at log 2^-52 (SIDECAR.md)
        ell = np.maximum(log_softmax(z), -52.0 * np.log(2.0))
        return softmax(matrix(params["w"], c, c) @ ell + np.asarray(params["b"]))
    if method == "opvector":
        a = np.asarray(params["a"], dtype=np.float64)
        b = np.asarray(params["b"], dtype=np.float64)
        return order_preserving(z, lambda y: softplus(a * y + b))
    if method == "fedcal":
        h = len(params["b1"])
        h1 = relu(matrix(params["w1"], h, c) @ z + np.asarray(params["b1"]))
        h2 = relu(matrix(params["w2"], h, h) @ h1 + np.asarray(params["b2"]))
        u = matrix(params["w3"], c, h) @ h2 + np.asarray(params["b3"])
        m = softplus(u)  # by rank: computed once, on z in class order
        return order_preserving(z, lambda y: m)
    if method == "platt":
        # one-vs-rest sigmoids of the logits, normalised (SIDECAR.md)
        a = np.asarray(params["a"], dtype=np.float64)
        b = np.asarray(params["b"], dtype=np.float64)
        return normalise_or(sigmoid(a * z + b), softmax(z))
    if method == "beta":
        # one-vs-rest beta maps of the clipped probabilities (SIDECAR.md)
        p = softmax(z)
        s = np.clip(p, BETA_EPS, 1 - BETA_EPS)
        u = np.asarray(params["a"]) * np.log(s) - np.asarray(params["b"]) * np.log(1 - s) + np.asarray(params["c"])
        return normalise_or(sigmoid(u), p)
    if method == "isotonic" and "x" in params:
        return isotonic_exact(z, params)
    if method in ("bin", "isotonic", "eqmass"):
        return binning(z, params["table"], params["bins"], params)
    if method == "bbq":
        return binning(z, params["table"], 2 ** params["mexp"], params)
    if method == "scalbin":
        bins = params["bins"]
        g = softmax(z / params["t"])
        th = np.asarray(params["thresholds"], dtype=np.float64)
        values = np.asarray(params["values"], dtype=np.float64)
        v = np.empty(c)
        for j in range(c):
            k = int(np.sum(g[j] >= th[j * (bins - 1):(j + 1) * (bins - 1)]))
            v[j] = values[j * bins + k]
        return normalise_or(v, g)
    raise ValueError("unknown method %r" % method)


def apply(file, rows):
    """Calibrated probabilities of rows (N×C) under the calibrator file."""
    if file.get("format") != FORMAT:
        raise ValueError("unsupported format %r: this applier reads %r" % (file.get("format"), FORMAT))
    c = file["classes"]
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, c)
    kind = file.get("provenance", {}).get("input", "logits") or "logits"
    out = np.empty_like(rows)
    for i, row in enumerate(rows):
        if kind == "probabilities":
            if np.any(row < 0) or np.any(row > 1) or abs(np.sum(row) - 1) > 1e-3:
                raise ValueError("row %d is not a distribution" % i)
            z = np.log(np.maximum(row, FLOOR))
        else:
            z = row
        out[i] = calibrate_row(file["method"], c, file["params"], z)
        if not np.all(np.isfinite(out[i])):
            raise ValueError("row %d: the calibrator gives a value that is not finite" % i)
    return out


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        file = json.load(f)
    with open(argv[2]) as f:
        rows = json.load(f)
    out = apply(file, rows)
    with open(argv[3], "w") as f:
        json.dump([[float(v) for v in row] for row in out], f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
