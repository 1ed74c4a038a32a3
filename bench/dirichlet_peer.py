"""A plain PyTorch Dirichlet calibration fit: the peer of
`fedcalib calibrate --central --method dirichlet --lambda L --mu M`
(bench/dirichlet.sh).

  dirichlet_peer.py LOGITS.npz LAMBDA MU [TARGET]
                                              fit, print one JSON line
  dirichlet_peer.py gen N C OUT.npz           write N rows of C-class logits

It minimises the objective fedcalib's fit minimises (SPEC §5, calib.Dirichlet):
the mean NLL of softmax(W·ℓ(z) + b), ℓ(z) = max(log softmax(z), log 2^-52),
plus the ODIR penalty λ/(C(C−1))·Σ_{i≠j} W_ij² + μ/C·Σ_j b_j², plus the
unit Gaussian prior around the identity, ‖θ − θ_I‖²/(2n), in float64, with
torch.optim.LBFGS (strong Wolfe line search) from W = I, b = 0 until the
largest gradient component is below 1e-7, as fedcalib's fit, or, given
TARGET (fedcalib's objective), until the objective is at most TARGET + 1e-9
(the same optimum). Torch's default threads.
"""
import json
import math
import sys
import time

import numpy as np
import torch


def gen(n, c, out):
    rng = np.random.default_rng(32)
    y = rng.integers(0, c, n)
    z = (2 * rng.standard_normal((n, c))).astype(np.float32)
    z[np.arange(n), np.where(rng.random(n) < 0.8, y, rng.integers(0, c, n))] += 5
    np.savez(out, logits=z, labels=y.astype(np.int32))


def fit(path, lam, mu, target=None):
    t0 = time.perf_counter()
    d = np.load(path)
    z = torch.from_numpy(d["logits"].astype(np.float64))
    y = torch.from_numpy(d["labels"].astype(np.int64))
    n, c = z.shape
    lp = torch.clamp(torch.log_softmax(z, dim=1), min=math.log(2.0 ** -52))
    w = torch.eye(c, dtype=torch.float64).requires_grad_()
    b = torch.zeros(c, dtype=torch.float64, requires_grad=True)
    off = 1 - torch.eye(c, dtype=torch.float64)
    eye = torch.eye(c, dtype=torch.float64)
    kw, kb = lam / (c * (c - 1)), mu / c
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=2000, max_eval=5000, history_size=10,
                            tolerance_grad=1e-7, tolerance_change=1e-15, line_search_fn="strong_wolfe")
    evals = 0

    def closure():
        nonlocal evals
        evals += 1
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(lp @ w.T + b, y)
        loss = loss + kw * ((w * off) ** 2).sum() + kb * (b ** 2).sum()
        loss = loss + (((w - eye) ** 2).sum() + (b ** 2).sum()) / (2 * n)
        loss.backward()
        return loss

    if target is None:
        opt.step(closure)
    else:
        # One iteration a step (LBFGS keeps its history between steps)
        # until the objective reaches fedcalib's.
        opt.param_groups[0]["max_iter"] = 1
        for _ in range(2000):
            if opt.step(closure).item() <= target + 1e-9:
                break
    f = closure().item()
    g = max(w.grad.abs().max().item(), b.grad.abs().max().item())
    print(json.dumps({"objective": f, "gradient": g, "evaluations": evals,
                      "seconds": time.perf_counter() - t0, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        fit(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]),
            float(sys.argv[4]) if len(sys.argv) > 4 else None)
