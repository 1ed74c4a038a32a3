#!/usr/bin/python3
"""The plain NumPy peer of `fedcalib eval --json` (bench/eval.sh): the code
a user would write to compute the same metrics of a logits file's softmax,
working in blocks of 2^18 rows so that its temporaries stay bounded.

  /usr/bin/python3 bench/eval_peer.py F.npz [BINS]

Per block: the float64 softmax; classwise and top-label equal-width bins
(np.bincount); accuracy, NLL (floored at 1e-12) and Brier. It keeps each
row's top confidence, whether it is right and its class probabilities,
and at the end sorts them (np.lexsort: value, then not-right before
right, as docs/CALIBRATION.md) for the adaptive ECE, the KS error and the
classwise equal-mass errors (adaptive cwECE, Kumar et al.'s debiased
classwise error, mean classwise KS). Prints them as JSON.
"""
import json
import sys

import numpy as np

BLOCK = 1 << 18


def equal_mass(v, a, bins):
    order = np.lexsort((a, v))
    v, a = v[order], a[order].astype(np.float64)
    n = len(v)
    m = min(bins, n)
    starts = (np.arange(m) * n) // m
    cnt = np.diff(np.r_[starts, n]).astype(np.float64)
    conf, acc = np.add.reduceat(v, starts), np.add.reduceat(a, starts)
    gap = np.abs(acc - conf).sum()
    ok = cnt >= 2
    am, cm = acc[ok] / cnt[ok], conf[ok] / cnt[ok]
    deb = (cnt[ok] / n * ((am - cm) ** 2 - am * (1 - am) / (cnt[ok] - 1))).sum()
    d = np.cumsum(v - a)
    ends = np.r_[v[1:] != v[:-1], True]
    return gap, deb, np.abs(d[ends]).max()


def main():
    path = sys.argv[1]
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    f = np.load(path)
    z_all, y_all = f["logits"], f["labels"].astype(np.int64)
    n, c = z_all.shape
    cnt = np.zeros(c * m)
    conf = np.zeros(c * m)
    freq = np.zeros(c * m)
    tcnt, tconf, tfreq = np.zeros(m), np.zeros(m), np.zeros(m)
    correct = nll = brier = 0.0
    tops = np.empty(n)
    rights = np.empty(n, dtype=bool)
    probs = np.empty((n, c))
    offs = m * np.arange(c)
    for lo in range(0, n, BLOCK):
        z = z_all[lo:lo + BLOCK].astype(np.float64)
        y = y_all[lo:lo + BLOCK]
        k = len(y)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        b = np.minimum((p * m).astype(np.int64), m - 1) + offs
        cnt += np.bincount(b.ravel(), minlength=c * m)
        conf += np.bincount(b.ravel(), weights=p.ravel(), minlength=c * m)
        rows = np.arange(k)
        freq += np.bincount(b[rows, y], minlength=c * m)
        arg = p.argmax(axis=1)
        top = p[rows, arg]
        right = arg == y
        tb = np.minimum((top * m).astype(np.int64), m - 1)
        tcnt += np.bincount(tb, minlength=m)
        tconf += np.bincount(tb, weights=top, minlength=m)
        tfreq += np.bincount(tb, weights=right, minlength=m)
        correct += right.sum()
        nll -= np.log(np.maximum(p[rows, y], 1e-12)).sum()
        p[rows, y] -= 1
        brier += (p * p).sum()
        p[rows, y] += 1
        tops[lo:lo + k], rights[lo:lo + k], probs[lo:lo + k] = top, right, p
    out = {
        "n": n, "classes": c, "accuracy": correct / n,
        "cwece": np.abs(conf - freq).sum() / n / c, "ece": np.abs(tconf - tfreq).sum() / n,
        "nll": nll / n, "brier": brier / n,
    }
    gap, _, ks = equal_mass(tops, rights, m)
    out["adaptive_ece"], out["ks"] = gap / n, ks / n
    gaps = debs = kss = 0.0
    for j in range(c):
        g, d, k = equal_mass(probs[:, j], y_all == j, m)
        gaps, debs, kss = gaps + g, debs + max(d, 0.0), kss + k
    out["adaptive_cwece"], out["debiased_cwce"], out["cw_ks"] = gaps / n / c, (debs / c) ** 0.5, kss / n / c
    print(json.dumps(out))


if __name__ == "__main__":
    main()
