"""A plain SciPy temperature-scaling fit: the peer of
`fedcalib calibrate --central --method temp` (bench/temperature.sh).

  temp_peer.py LOGITS.npz     fit, print one JSON line
  temp_peer.py gen N C OUT.npz

The code a user would write: the logits as float64, the mean NLL of
softmax(z/T) through scipy.special.logsumexp, and
scipy.optimize.minimize_scalar, bounded to T in [0.01, 100] (fedcalib's
bounds), at its default tolerance.
"""
import json
import sys
import time

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp


def gen(n, c, out):
    rng = np.random.default_rng(4)
    y = rng.integers(0, c, n)
    z = (2 * rng.standard_normal((n, c))).astype(np.float32)
    z[np.arange(n), np.where(rng.random(n) < 0.8, y, rng.integers(0, c, n))] += 6
    np.savez(out, logits=z, labels=y.astype(np.int32))


def fit(path):
    t0 = time.perf_counter()
    d = np.load(path)
    z = d["logits"].astype(np.float64)
    y = d["labels"].astype(np.int64)
    zy = z[np.arange(len(y)), y]

    def nll(t):
        return np.mean(logsumexp(z / t, axis=1) - zy / t)

    r = minimize_scalar(nll, bounds=(0.01, 100), method="bounded")
    print(json.dumps({"t": r.x, "nll": r.fun, "evaluations": r.nfev, "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        fit(sys.argv[1])
