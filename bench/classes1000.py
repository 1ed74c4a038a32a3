"""Helpers of bench/classes1000.sh (plain NumPy).

  classes1000.py gen N C OUT.npz     write N rows of C-class logits as
                                     integration's TestImageNetClasses
                                     makes them (float32 logits N(0, 3²),
                                     +15 on the label 70% of the time, on
                                     a random class otherwise; int32 labels)
  classes1000.py fit CALIBRATOR.json print the fit's provenance in one line
"""
import json
import sys

import numpy as np


def gen(n, c, out):
    rng = np.random.default_rng(29)
    y = rng.integers(0, c, n)
    top = np.where(rng.random(n) < 0.7, y, rng.integers(0, c, n))
    z = (3 * rng.standard_normal((n, c))).astype(np.float32)
    z[np.arange(n), top] += 15
    np.savez(out, logits=z, labels=y.astype(np.int32))


def fit(path):
    with open(path) as f:
        d = json.load(f)
    p = d.get("provenance", {}).get("fit")
    if not p:
        print("-")
        return
    print(f"converged={str(p.get('converged')).lower()} iterations={p.get('iterations')} "
          f"objective={p.get('objective', 0)!r} stop={p.get('stop', '').replace(' ', '_')}")


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "fit":
        fit(sys.argv[2])
    else:
        sys.exit(__doc__)
