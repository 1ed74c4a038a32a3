#!/usr/bin/python3
"""Reference values of calib's exact isotonic regression, computed once by
scikit-learn (1.2.1), independently of the Go code, so that CI needs no
Python.

Run from this directory:  /usr/bin/python3 make_isotonic_reference.py
It writes isotonic_reference.json, which isotonic_exact_test.go reads,
and reads mnistlike.npz (written by make_reference.py).

"scores": one-vs-rest cases given as scores x in [0, 1] and 0/1 targets
  y: sklearn.isotonic.IsotonicRegression(y_min=0, y_max=1,
  out_of_bounds="clip").fit(x, y), recording its breakpoints
  (X_thresholds_, y_thresholds_) and predict at query points (outside
  the range, at every breakpoint, between breakpoints). The cases cover
  distinct scores, exact ties (a coarse grid), near-ties closer than
  scikit-learn's merge resolution 1e-15, constant targets, a single row,
  a decreasing relation (one pooled block) and saturated scores.
"pav": weighted PAV alone, sklearn.isotonic.isotonic_regression(y,
  sample_weight=w), on random values and weights, with ties.
"mnistlike": the exact one-vs-rest fit of each class on the softmax of
  the calibration rows (split 1) of mnistlike.npz, and the predictions on
  its test rows (split 2): each class's IsotonicRegression on p_j,
  normalised across classes (fedcalib's rule: p itself where the values
  sum to 0). The softmax is computed as Go computes it (max subtracted,
  exponentials summed in class order), but NumPy's exp may differ from
  Go's in the last bit, so the test compares these more loosely.
"""
import json

import numpy as np
from sklearn.isotonic import IsotonicRegression, isotonic_regression


def softmax(z):
    z = z.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    s = e[:, 0].copy()
    for j in range(1, z.shape[1]):  # summed in order, as Go does
        s = s + e[:, j]
    return e / s[:, None]


def fit(x, y):
    return IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(x, y)


def score_cases():
    rng = np.random.default_rng(32)
    cases = {}
    x = rng.random(200)
    cases["distinct"] = (x, (rng.random(200) < x ** 2).astype(float))
    x = np.round(rng.random(300) * 8) / 8
    cases["grid ties"] = (x, (rng.random(300) < x).astype(float))
    base = np.array([0.25, 0.5, 0.75])
    x = np.concatenate([b + np.arange(12) * 3e-16 for b in base])  # runs of near-ties
    x = np.concatenate([x, rng.random(40)])
    cases["near ties"] = (x, (rng.random(len(x)) < x).astype(float))
    x = rng.random(50)
    cases["all negative"] = (x, np.zeros(50))
    cases["all positive"] = (x, np.ones(50))
    cases["one row"] = (np.array([0.3]), np.array([1.0]))
    x = rng.random(60)
    cases["decreasing"] = (x, (x < 0.5).astype(float))
    x = np.concatenate([1 - rng.random(30) * 1e-14, np.ones(10), rng.random(30)])
    cases["saturated"] = (x, (rng.random(len(x)) < x).astype(float))
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    cases["hand"] = (x, np.array([0.0, 1.0, 0.0, 1.0, 1.0, 1.0]))
    out = []
    for name, (x, y) in cases.items():
        ir = fit(x, y)
        xt, yt = ir.X_thresholds_, ir.y_thresholds_
        mids = (xt[1:] + xt[:-1]) / 2 if len(xt) > 1 else np.array([])
        q = np.concatenate([[-0.5, 0.0, 1.0, 1.5], xt, mids, rng.random(20)])
        out.append({
            "name": name,
            "x": x.tolist(), "y": y.tolist(),
            "bx": xt.tolist(), "by": yt.tolist(),
            "query": q.tolist(), "predict": ir.predict(q).tolist(),
        })
    return out


def pav_cases():
    rng = np.random.default_rng(17)
    out = []
    for n in [1, 2, 5, 30, 200]:
        y = np.round(rng.random(n) * 6) / 6  # ties
        w = rng.random(n) * 3 + 0.1
        out.append({"y": y.tolist(), "w": w.tolist(),
                    "fit": isotonic_regression(y, sample_weight=w).tolist()})
    return out


def mnistlike():
    f = np.load("mnistlike.npz")
    z, labels, split = f["logits"], f["labels"], f["split"]
    cal, test = split == 1, split == 2
    p_cal, p_test = softmax(z[cal]), softmax(z[test])
    c = z.shape[1]
    g = np.empty_like(p_test)
    breakpoints = []
    for j in range(c):
        ir = fit(p_cal[:, j], (labels[cal] == j).astype(float))
        breakpoints.append(len(ir.X_thresholds_))
        g[:, j] = ir.predict(p_test[:, j])
    s = g.sum(axis=1, keepdims=True)
    prob = np.where(s > 0, g / np.where(s > 0, s, 1), p_test)
    lab = labels[test]
    nll = float(-np.mean(np.log(np.maximum(prob[np.arange(len(lab)), lab], 1e-12))))
    return {"breakpoints": breakpoints, "test_probabilities": prob.tolist(), "test_nll": nll}


def main():
    import sklearn
    ref = {
        "sklearn": sklearn.__version__,
        "scores": score_cases(),
        "pav": pav_cases(),
        "mnistlike": mnistlike(),
    }
    with open("isotonic_reference.json", "w") as f:
        json.dump(ref, f)


if __name__ == "__main__":
    main()
