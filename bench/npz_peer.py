"""NumPy peer of bench/npz.sh.

  npz_peer.py gen DIR N C      write DIR/N_C_savez.npz and DIR/N_C_compressed.npz
  npz_peer.py eval FILE [BINS] load FILE, print accuracy and cwECE as JSON
  npz_peer.py summary TSV      print medians and ratios of the timings in TSV

Runs with Debian's python3-numpy (/usr/bin/python3). The metrics follow
SPEC §4: softmax probabilities in float64, the bin of v is
min(floor(v·M), M−1), cwECE = (1/C) Σ_j Σ_m (|B_jm|/N)·|mean p̂ − mean 1{y=j}|.
"""

import json
import os
import statistics
import sys

import numpy as np


def gen(out, n, c):
    rng = np.random.default_rng(20261126)
    labels = rng.integers(0, c, size=n, dtype=np.int64)
    logits = rng.standard_normal((n, c), dtype=np.float32)
    logits *= 2
    # A weak model: the true class gets +2, so accuracy is about 0.34.
    logits[np.arange(n), labels] += 2
    base = os.path.join(out, "%d_%d" % (n, c))
    np.savez(base + "_savez.npz", logits=logits, labels=labels)
    np.savez_compressed(base + "_compressed.npz", logits=logits, labels=labels)


def evaluate(path, bins=15):
    with np.load(path) as d:
        z = d["logits"]
        y = d["labels"]
    n, c = z.shape
    z = z.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    p = z
    accuracy = float(np.mean(p.argmax(axis=1) == y))
    b = np.minimum((p * bins).astype(np.int64), bins - 1)
    b += np.arange(c, dtype=np.int64) * bins  # one bin range per class
    sum_p = np.bincount(b.ravel(), weights=p.ravel(), minlength=c * bins)
    # 1{y_i = j} is 1 only in the bin of the true class's probability.
    sum_y = np.bincount(b[np.arange(n), y], minlength=c * bins)
    cwece = float(np.abs(sum_p - sum_y).sum() / n / c)
    return {"n": n, "classes": c, "accuracy": accuracy, "cwece": cwece}


def summary(tsv):
    """Medians per (size, format, tool) and ratios to NumPy.

    The ratio is the median over repetitions of tool time / NumPy time in
    the same repetition (the tools run back to back), which cancels slow
    drifts in machine load better than a ratio of medians.
    """
    rows = {}
    with open(tsv) as f:
        for line in f:
            size, fmt, tool, wall, rss = line.split()
            r = rows.setdefault((size, fmt, tool), ([], []))
            r[0].append(float(wall))
            r[1].append(int(rss))

    def cells(size):
        n, c = size.split("x")
        return int(n) * int(c)

    keys = sorted({(s, f) for s, f, _ in rows}, key=lambda k: (cells(k[0]), k[0], k[1]))
    tools = sorted({t for _, _, t in rows}, key=lambda t: (t != "numpy", t))
    print("| rows × classes | file | tool | reps | median wall (s) | median of paired ratios to NumPy (min–max) | peak RSS (MiB) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for s, fmt in keys:
        base = rows.get((s, fmt, "numpy"), ([], []))[0]
        for t in tools:
            if (s, fmt, t) not in rows:
                continue
            walls, rss = rows[(s, fmt, t)]
            ratios = [w / b for w, b in zip(walls, base) if b > 0]
            cell = "%.2f× (%.2f–%.2f)" % (statistics.median(ratios), min(ratios), max(ratios)) if ratios else "—"
            print("| %s | %s | %s | %d | %.2f | %s | %.0f |" % (
                s.replace("x", " × "), fmt, t, len(walls), statistics.median(walls), cell, max(rss) / 1024))


def main():
    cmd = sys.argv[1]
    if cmd == "gen":
        gen(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "eval":
        bins = int(sys.argv[3]) if len(sys.argv) > 3 else 15
        print(json.dumps(evaluate(sys.argv[2], bins)))
    elif cmd == "summary":
        summary(sys.argv[2])
    else:
        sys.exit("usage: npz_peer.py gen DIR N C | eval FILE [BINS] | summary TSV")


if __name__ == "__main__":
    main()
