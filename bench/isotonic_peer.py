"""A plain scikit-learn isotonic calibration: the peer of
`fedcalib calibrate --central --method isotonic` (bench/isotonic.sh).

  isotonic_peer.py LOGITS.npz     fit on split 1, score split 2, print one JSON line
  isotonic_peer.py gen N C OUT.npz

The code a user would write: the softmax of the logits in float64, one
sklearn.isotonic.IsotonicRegression(out_of_bounds="clip", y_min=0,
y_max=1) per class fitted one-vs-rest on the calibration rows (split 1),
predicted on the test rows (split 2) and normalised across classes
(CalibratedClassifierCV's rule; a row whose values sum to 0 keeps its
softmax, as fedcalib does). It prints the test NLL (probabilities
floored at 1e-12, as fedcalib's metrics) and its own seconds.
"""
import json
import sys
import time

import numpy as np
from scipy.special import softmax
from sklearn.isotonic import IsotonicRegression


def gen(n, c, out):
    rng = np.random.default_rng(32)
    y = rng.integers(0, c, n)
    z = (2 * rng.standard_normal((n, c))).astype(np.float32)
    z[np.arange(n), np.where(rng.random(n) < 0.8, y, rng.integers(0, c, n))] += 6
    split = np.where(np.arange(n) % 2 == 0, 1, 2).astype(np.uint8)  # calibration, test
    np.savez(out, logits=z, labels=y.astype(np.int32), split=split)


def fit(path):
    t0 = time.perf_counter()
    d = np.load(path)
    p = softmax(d["logits"].astype(np.float64), axis=1)
    y, split = d["labels"].astype(np.int64), d["split"]
    cal, test = split == 1, split == 2
    g = np.empty((test.sum(), p.shape[1]))
    for j in range(p.shape[1]):
        ir = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1)
        ir.fit(p[cal, j], (y[cal] == j).astype(np.float64))
        g[:, j] = ir.predict(p[test, j])
    s = g.sum(axis=1, keepdims=True)
    q = np.where(s > 0, g / np.where(s > 0, s, 1), p[test])
    yt = y[test]
    nll = float(-np.mean(np.log(np.maximum(q[np.arange(len(yt)), yt], 1e-12))))
    print(json.dumps({"test_nll": nll, "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        fit(sys.argv[1])
