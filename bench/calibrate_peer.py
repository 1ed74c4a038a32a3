"""NumPy/SciPy peer of bench/calibrate.sh.

  calibrate_peer.py gen DIR N C            write DIR/N_C.npz (np.savez: logits, labels)
  calibrate_peer.py temp FILE              fit temperature scaling, print JSON
  calibrate_peer.py bbq FILE [MEXP]        fit BBQ (2^MEXP fine bins, default 7), print JSON
  calibrate_peer.py agree PEER.json C.json fedcalib's calibrator (sidecar) vs the peer's fit
  calibrate_peer.py summary TSV            medians, paired ratios and peak RSS

Runs with Debian's python3-numpy and python3-scipy (/usr/bin/python3).
Each fit does what `fedcalib calibrate --central` does on a file without a
split column: load the file, fit on every row, and report the cwECE
(15 bins, SPEC §4) of the fitted rows before and after.

temp: the mean NLL of softmax(z/T), in float64, minimised over log T in
[log 0.01, log 100] by scipy.optimize.minimize_scalar (bounded Brent),
xatol 1e-10 so that T agrees with fedcalib's Newton-safeguarded fit.

bbq: SPEC §5 in NumPy. One-vs-all histograms of 2^MEXP fine bins per class
of the softmax probabilities; schemes of 2, 4, ..., 2^MEXP bins by merging
neighbouring bins; each scheme's log score
  Σ_b lgamma(N'/B) − lgamma(N_b + N'/B) + lgamma(m_b + α_b) − lgamma(α_b)
      + lgamma(n_b + β_b) − lgamma(β_b),
N' = 2, α_b = (N'/B)·mid_b, β_b = (N'/B)·(1 − mid_b), normalised with
log-sum-exp; the table is the score-weighted average of the schemes'
posterior means (m_b + α_b)/(N_b + N'/B) on the fine bins. Prediction:
g_j = table_j[bin(p_j)], normalised to sum to 1.
"""

import json
import os
import statistics
import sys

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import gammaln, logsumexp

BINS = 15  # metric bins


def gen(out, n, c):
    # The layout and model of bench/npz_peer.py gen: a weak, overconfident
    # model (accuracy about 0.34), logits and labels only.
    rng = np.random.default_rng(20261126)
    labels = rng.integers(0, c, size=n, dtype=np.int64)
    logits = rng.standard_normal((n, c), dtype=np.float32)
    logits *= 2
    logits[np.arange(n), labels] += 2
    np.savez(os.path.join(out, "%d_%d.npz" % (n, c)), logits=logits, labels=labels)


def load(path):
    with np.load(path) as d:
        z = d["logits"]
        y = d["labels"]
        if "split" in d:
            keep = d["split"] == 1
            z, y = z[keep], y[keep]
    return z, y


def softmax(z):
    p = z.astype(np.float64)
    p -= p.max(axis=1, keepdims=True)
    np.exp(p, out=p)
    p /= p.sum(axis=1, keepdims=True)
    return p


def cwece(p, y):
    n, c = p.shape
    b = np.minimum((p * BINS).astype(np.int64), BINS - 1)
    b += np.arange(c, dtype=np.int64) * BINS
    sum_p = np.bincount(b.ravel(), weights=p.ravel(), minlength=c * BINS)
    sum_y = np.bincount(b[np.arange(n), y], minlength=c * BINS)
    return float(np.abs(sum_p - sum_y).sum() / n / c)


def fit_temp(path):
    z32, y = load(path)
    z = z32.astype(np.float64)
    zy = z[np.arange(len(y)), y]

    def nll(log_t):
        s = z / np.exp(log_t)
        return float(np.mean(logsumexp(s, axis=1) - zy / np.exp(log_t)))

    r = minimize_scalar(nll, bounds=(np.log(0.01), np.log(100)), method="bounded",
                        options={"xatol": 1e-10})
    t = float(np.exp(r.x))
    return {"method": "temp", "n": len(y), "t": t, "nfev": int(r.nfev),
            "cwece_before": cwece(softmax(z), y), "cwece_after": cwece(softmax(z / t), y)}


def bbq_table(pos, neg, mexp):
    """The BBQ table of one class from its fine-bin counts."""
    fine = 1 << mexp
    prior = 2.0
    scores, preds = [], []
    for k in range(1, mexp + 1):
        nb = 1 << k
        m = pos.reshape(nb, -1).sum(axis=1)
        n = neg.reshape(nb, -1).sum(axis=1)
        mid = (np.arange(nb) + 0.5) / nb
        a, b = prior / nb * mid, prior / nb * (1 - mid)
        scores.append(np.sum(gammaln(prior / nb) - gammaln(m + n + prior / nb)
                             + gammaln(m + a) - gammaln(a) + gammaln(n + b) - gammaln(b)))
        preds.append(np.repeat((m + a) / (m + n + prior / nb), fine // nb))
    w = np.exp(np.array(scores) - logsumexp(scores))
    return w @ np.array(preds)


def fit_bbq(path, mexp=7):
    z32, y = load(path)
    p = softmax(z32)
    n, c = p.shape
    fine = 1 << mexp
    bins = np.minimum((p * fine).astype(np.int64), fine - 1)
    pos = np.zeros((c, fine))
    neg = np.zeros((c, fine))
    for j in range(c):
        is_j = y == j
        pos[j] = np.bincount(bins[is_j, j], minlength=fine)
        neg[j] = np.bincount(bins[~is_j, j], minlength=fine)
    table = np.array([bbq_table(pos[j], neg[j], mexp) for j in range(c)])
    g = table[np.arange(c), bins]
    s = g.sum(axis=1, keepdims=True)
    q = np.where(s > 0, g / np.where(s > 0, s, 1), p)
    return {"method": "bbq", "n": n, "mexp": mexp, "table": table.ravel().tolist(),
            "cwece_before": cwece(p, y), "cwece_after": cwece(q, y)}


def agree(peer_path, sidecar_path):
    peer = json.load(open(peer_path))
    params = json.load(open(sidecar_path))["params"]
    if peer["method"] == "temp":
        diff = abs(peer["t"] - params["t"]) / params["t"]
        if diff > 1e-6:
            sys.exit("T differs: peer %r fedcalib %r" % (peer["t"], params["t"]))
        print("temp: T %.10g (peer %.10g, relative difference %.1e)" % (params["t"], peer["t"], diff))
    else:
        diff = float(np.max(np.abs(np.array(peer["table"]) - np.array(params["table"]))))
        if diff > 1e-9:
            sys.exit("BBQ tables differ by %g" % diff)
        print("bbq: tables agree to %.1e" % diff)


def summary(tsv):
    """Medians per (size, tool), and the median over repetitions of the
    fedcalib / peer time ratio of the same repetition."""
    rows = {}
    with open(tsv) as f:
        for line in f:
            size, method, tool, rep, wall, rss = line.split()
            rows.setdefault((size, method), {}).setdefault(tool, {})[int(rep)] = (float(wall), int(rss))
    print("| file | method | peer median s | fedcalib median s | fedcalib / peer (median of paired ratios, range) | peak RSS peer / fedcalib | fedcalib RSS / logits bytes |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (size, method), tools in rows.items():
        n, c = (int(v) for v in size.split("x"))
        peer, fc = tools["peer"], tools["fedcalib"]
        reps = sorted(set(peer) & set(fc))
        ratios = [fc[r][0] / peer[r][0] for r in reps]
        med = lambda xs: statistics.median(xs)
        logit_bytes = 4 * n * c
        print("| %s | %s | %.2f | %.2f | %.2f× (%.2f–%.2f) | %.0f / %.0f MiB | %.2f× |" % (
            size, method, med([peer[r][0] for r in reps]), med([fc[r][0] for r in reps]),
            med(ratios), min(ratios), max(ratios),
            med([peer[r][1] for r in reps]) / 1024, med([fc[r][1] for r in reps]) / 1024,
            med([fc[r][1] for r in reps]) * 1024 / logit_bytes))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "gen":
        gen(args[0], int(args[1]), int(args[2]))
    elif cmd == "temp":
        print(json.dumps(fit_temp(args[0])))
    elif cmd == "bbq":
        print(json.dumps(fit_bbq(args[0], int(args[1]) if len(args) > 1 else 7)))
    elif cmd == "agree":
        agree(args[0], args[1])
    elif cmd == "summary":
        summary(args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
