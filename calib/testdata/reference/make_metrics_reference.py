#!/usr/bin/python3
"""Reference values of calib's equal-mass and Kolmogorov-Smirnov metrics,
computed once in NumPy, independently of the Go code, so that CI needs no
Python.

Run from this directory:  /usr/bin/python3 make_metrics_reference.py
It reads mnistlike.npz and extreme.npz (written by make_reference.py) and
writes metrics_reference.json, which metrics_reference_test.go reads.

For each file, the test rows (split 2) and all rows, and 15, 10 and 7
bins, from the float64 softmax of the float32 logits:
  top-label adaptive ECE and KS error (TopLabel.AdaptiveECE, TopLabel.KS)
  classwise adaptive ECE, debiased classwise error, mean classwise KS
  (Classwise), with the formulas of docs/CALIBRATION.md.

Two transcriptions of the authors' code check that these are their
metrics where the definitions meet:
  kumar_debiased_cwce: Kumar et al.'s calibration.get_calibration_error
    (marginal, p = 2, debias, get_equal_bins), which cuts at midpoints
    between np.array_split's parts; on distinct values and N divisible by
    the bins its bins are ours, and the script asserts the two agree.
  gupta_ks: Gupta et al.'s top-label KS (argsort, cumulative sums); on
    distinct confidences it is ours, and the script asserts so.
"""
import json

import numpy as np

FILES = ["mnistlike", "extreme"]
BINS = [15, 10, 7]


def softmax(z):
    z = z.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    s = e[:, 0].copy()
    for j in range(1, z.shape[1]):  # summed in order, as Go does
        s = s + e[:, j]
    return e / s[:, None]


def equal_mass(v, a, bins):
    """Errors of values v with outcomes a (0/1) over min(bins, N)
    equal-mass bins of sorted positions floor(mN/M)..floor((m+1)N/M)-1,
    ties ordered a = 0 before a = 1. Returns (gap sum, debiased sum, KS
    sum), each not yet divided by N."""
    order = np.lexsort((a, v))
    v, a = v[order], a[order].astype(np.float64)
    n = len(v)
    m = min(bins, n)
    edges = (np.arange(m + 1) * n) // m
    gap = deb = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        cnt = hi - lo
        conf, acc = v[lo:hi].sum(), a[lo:hi].sum()
        gap += abs(acc - conf)
        if cnt >= 2:
            am, cm = acc / cnt, conf / cnt
            deb += cnt / n * ((am - cm) ** 2 - am * (1 - am) / (cnt - 1))
    d = np.cumsum(v - a)
    ends = np.r_[v[1:] != v[:-1], True]  # where the value changes
    ks = np.abs(d[ends]).max()
    return gap, deb, ks


def kumar_debiased_cwce(p, y, bins):
    """A transcription of Kumar et al.'s get_calibration_error(probs,
    labels, p=2, debias=True, mode='marginal') with num_bins bins."""
    def get_equal_bins(probs, num_bins):
        sorted_probs = sorted(probs)
        num_bins = min(num_bins, len(sorted_probs))
        binned = np.array_split(sorted_probs, num_bins)
        b = [(binned[i][-1] + binned[i + 1][0]) / 2.0 for i in range(len(binned) - 1)]
        b.append(1.0)
        return sorted(set(b))

    def unbiased_l2_ce(binned):
        total = sum(len(d) for d in binned)
        err = 0.0
        for d in binned:
            if len(d) < 2:
                continue
            probs = np.array([x[0] for x in d])
            labels = np.array([x[1] for x in d], dtype=np.float64)
            biased = (probs.mean() - labels.mean()) ** 2
            var = labels.mean() * (1 - labels.mean()) / (len(d) - 1.0)
            err += len(d) / total * (biased - var)
        return max(err, 0.0) ** 0.5

    ces = []
    for k in range(p.shape[1]):
        probs, labels = p[:, k], (y == k).astype(int)
        b = get_equal_bins(probs, bins)
        idx = np.searchsorted(b, probs)
        binned = [[] for _ in b]
        for pr, la, i in zip(probs, labels, idx):
            binned[i].append((pr, la))
        ces.append(unbiased_l2_ce([d for d in binned if d]) ** 2)
    return float(np.mean(ces) ** 0.5)


def gupta_ks(conf, right):
    order = np.argsort(conf, kind="stable")
    n = len(conf)
    return float(np.abs(np.cumsum(conf[order]) / n - np.cumsum(right[order]) / n).max())


def metrics(p, y, bins):
    n, c = p.shape
    arg = p.argmax(axis=1)  # the first on ties, as Go
    conf, right = p[np.arange(n), arg], (arg == y)
    gap, _, ks = equal_mass(conf, right, bins)
    out = {"adaptive_ece": gap / n, "ks": ks / n}
    gaps, debs, kss = [], [], []
    for j in range(c):
        g, d, k = equal_mass(p[:, j], y == j, bins)
        gaps.append(g)
        debs.append(max(d, 0.0))
        kss.append(k)
    out["adaptive_cwece"] = sum(gaps) / n / c
    out["debiased_cwce"] = (sum(debs) / c) ** 0.5
    out["cw_ks"] = sum(kss) / n / c
    out["kumar_debiased_cwce"] = kumar_debiased_cwce(p, y, bins)
    out["gupta_ks"] = gupta_ks(conf, right.astype(np.float64))
    distinct = all(len(np.unique(p[:, j])) == n for j in range(c))
    if distinct and n % bins == 0:
        assert abs(out["kumar_debiased_cwce"] - out["debiased_cwce"]) < 1e-12, out
    if len(np.unique(conf)) == n:
        assert abs(out["gupta_ks"] - out["ks"]) < 1e-12, out
    return out


def main():
    out = {"files": {}}
    for name in FILES:
        f = np.load(name + ".npz")
        p, y, split = softmax(f["logits"]), f["labels"].astype(int), f["split"]
        r = {}
        for sname, rows in [("test", split == 2), ("all", np.ones(len(y), dtype=bool))]:
            r[sname] = {str(b): metrics(p[rows], y[rows], b) for b in BINS}
        out["files"][name] = r
        print(name, json.dumps(r["test"]["15"], indent=1))
    with open("metrics_reference.json", "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
