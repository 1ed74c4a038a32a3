#!/usr/bin/python3
"""Reference values for calib's tests, computed once by independent
optimisers (SciPy's L-BFGS-B and bounded scalar search, gradients by
PyTorch autograd in float64) and metric code (NumPy), so that CI needs no
Python.

Run from this directory:  /usr/bin/python3 make_reference.py
It writes mnistlike.npz and extreme.npz (logits files: 2000 calibration
rows, split 1, and 1000 test rows, split 2, of 10 classes) and
reference.json. The Go tests (reference_test.go) read all three.

mnistlike: an overconfident 10-class classifier of about 97% accuracy.
extreme:   the same rows, 0.5% of them (every 200th) replaced by two tied
           top logits at 0 and the other eight at -1e4, labelled uniformly
           at random over the 10 classes (so most are mislabelled).

Objectives (what the Go fits minimise, calib.FitReport.Objective), on the
calibration rows, n of them, with theta0 the identity parameters:
  temp:      mean NLL of softmax(z/T), T in [0.01, 100]
  vector, matrix, opvector, dirichlet: mean NLL + |theta - theta0|^2/(2n)
  dirichlet: + lam/(C(C-1)) sum_{i!=j} W_ij^2 + mu/C sum_j b_j^2 on the
             log-probabilities clamped at log 2^-52; the prior applies to
             the variant's free parameters.
"""
import json

import numpy as np
import scipy.optimize
import torch

torch.set_default_dtype(torch.float64)
C = 10
N_CAL, N_TEST = 2000, 1000
LOG_FLOOR = np.log(2.0 ** -52)


def make_files():
    rng = np.random.default_rng(20261127)
    n = N_CAL + N_TEST
    y = rng.integers(0, C, size=n)
    z = rng.normal(0.0, 1.0, size=(n, C))
    winner = y.copy()
    confused = rng.random(n) < 0.03
    winner[confused] = rng.integers(0, C, size=confused.sum())
    z[np.arange(n), winner] += rng.normal(5.0, 1.5, size=n)
    z *= 1.8  # overconfident
    split = np.concatenate([np.ones(N_CAL), 2 * np.ones(N_TEST)]).astype(np.uint8)
    z = z.astype(np.float32)
    np.savez("mnistlike.npz", logits=z, labels=y.astype(np.int64), split=split)
    ze, ye = z.copy(), y.copy()
    for i in range(0, n, 200):
        a, b = rng.choice(C, size=2, replace=False)
        ze[i, :] = -1e4
        ze[i, a] = 0
        ze[i, b] = 0
        ye[i] = rng.integers(0, C)
    np.savez("extreme.npz", logits=ze, labels=ye.astype(np.int64), split=split)
    return {"mnistlike": (z, y, split), "extreme": (ze, ye, split)}


def nll_rows(logit_rows, y):
    return torch.logsumexp(logit_rows, dim=1) - logit_rows[torch.arange(len(y)), y]


def rms_scales(features):
    """max(1, RMS) of each column: the diagonal preconditioner of the
    parameters that multiply it (logits of -1e4 beside logits of 1 make
    the objective too ill-conditioned for L-BFGS-B otherwise)."""
    return np.maximum(1.0, np.sqrt((np.asarray(features, dtype=float) ** 2).mean(axis=0)))


def minimise(fun, x0, scale=None):
    """L-BFGS-B on y = x * scale with float64 autograd gradients, run to
    the floor of float64, restarted until it stops improving, then
    finished by Newton steps on the autograd Hessian."""
    scale = np.ones(len(x0)) if scale is None else np.asarray(scale, dtype=float)
    st = torch.tensor(scale)
    def fg(y):
        t = torch.tensor(y, requires_grad=True)
        v = fun(t / st)
        v.backward()
        return v.item(), t.grad.numpy().copy()
    y, best = np.array(x0, dtype=float) * scale, None
    for _ in range(20):
        res = scipy.optimize.minimize(fg, y, jac=True, method="L-BFGS-B",
                                      options={"maxiter": 100000, "maxfun": 200000, "ftol": 1e-16, "gtol": 1e-14, "maxcor": 30})
        if best is not None and res.fun >= best - 1e-17:
            break
        y, best = res.x, res.fun
    x = y / scale
    fx = fun(torch.tensor(x)).item()
    for _ in range(50):
        xt = torch.tensor(x, requires_grad=True)
        g = torch.autograd.grad(fun(xt), xt)[0].numpy()
        if np.abs(g).max() < 1e-13:
            break
        H = torch.autograd.functional.hessian(fun, torch.tensor(x)).numpy()
        try:
            step = np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            break
        t, done = 1.0, True
        while t > 1e-12:
            v = fun(torch.tensor(x - t * step)).item()
            if v < fx:
                x, fx, done = x - t * step, v, False
                break
            t /= 2
        if done:
            break
    xt = torch.tensor(x, requires_grad=True)
    v = fun(xt)
    g = torch.autograd.grad(v, xt)[0].numpy()
    return x, v.item(), float(np.abs(g).max())


def fit_temp(z, y):
    zt, yt = torch.tensor(z), torch.tensor(y)
    def f(u):
        return nll_rows(zt / np.exp(u), yt).mean().item()
    lo, hi = np.log(0.01), np.log(100.0)
    res = scipy.optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-13})
    cands = [res.x, lo, hi]
    u = min(cands, key=f)
    return {"objective": f(u), "t": float(np.exp(u))}


def fit_vector(z, y):
    zt, yt, n = torch.tensor(z), torch.tensor(y), len(y)
    x0 = np.concatenate([np.ones(C), np.zeros(C)])
    x0t = torch.tensor(x0)
    def f(x):
        return nll_rows(zt * x[:C] + x[C:], yt).mean() + ((x - x0t) ** 2).sum() / (2 * n)
    x, v, g = minimise(f, x0, np.concatenate([rms_scales(z), np.ones(C)]))
    return {"objective": v, "gradient": g}


def fit_matrix(z, y):
    zt, yt, n = torch.tensor(z), torch.tensor(y), len(y)
    x0 = np.concatenate([np.eye(C).ravel(), np.zeros(C)])
    x0t = torch.tensor(x0)
    def f(x):
        W = x[:C * C].reshape(C, C)
        return nll_rows(zt @ W.T + x[C * C:], yt).mean() + ((x - x0t) ** 2).sum() / (2 * n)
    x, v, g = minimise(f, x0, np.concatenate([np.tile(rms_scales(z), C), np.ones(C)]))
    return {"objective": v, "gradient": g}


def fit_opvector(z, y):
    zt, yt, n = torch.tensor(z), torch.tensor(y), len(y)
    x0 = np.concatenate([np.zeros(C), np.full(C, np.log(np.e - 1))])
    x0t = torch.tensor(x0)
    ys, perm = torch.sort(zt, dim=1, descending=True, stable=True)
    rank = torch.argsort(perm, dim=1)[torch.arange(n), yt]
    gaps = ys[:, :-1] - ys[:, 1:]
    def f(x):
        m = torch.nn.functional.softplus(x[:C - 1] * ys[:, :-1] + x[C:2 * C - 1])
        w = gaps * m
        # yhat_k = sum_{i >= k} w_i, yhat_C = 0
        tail = torch.flip(torch.cumsum(torch.flip(w, [1]), 1), [1])
        yhat = torch.cat([tail, torch.zeros(n, 1)], dim=1)
        nll = torch.logsumexp(yhat, 1) - yhat[torch.arange(n), rank]
        return nll.mean() + ((x - x0t) ** 2).sum() / (2 * n)
    # The objective is not convex in a: the least of several local
    # minima, from the identity and from 8 seeded perturbations of it.
    scale = np.concatenate([rms_scales(ys.numpy()), np.ones(C)])
    rng = np.random.default_rng(7)
    best = None
    for start in [x0] + [x0 + rng.normal(0, 0.3, size=2 * C) / scale for _ in range(8)]:
        x, v, g = minimise(f, start, scale)
        if best is None or v < best[0]:
            best = (v, g)
    return {"objective": best[0], "gradient": best[1]}


def log_probs(z):
    lp = torch.log_softmax(torch.tensor(z), dim=1)
    return torch.clamp(lp, min=LOG_FLOOR)


def fit_dirichlet(z, y, variant, lam, mu):
    lp, yt, n = log_probs(z), torch.tensor(y), len(y)
    eye = torch.eye(C)
    if variant == "full":
        u0 = np.concatenate([np.eye(C).ravel(), np.zeros(C)])
        def expand(u):
            return u[:C * C].reshape(C, C), u[C * C:]
    elif variant == "diag":
        u0 = np.concatenate([np.ones(C), np.zeros(C)])
        def expand(u):
            return torch.diag(u[:C]), u[C:]
    else:
        u0 = np.ones(1)
        def expand(u):
            return u[0] * eye, torch.zeros(C)
    u0t = torch.tensor(u0)
    def f(u):
        W, b = expand(u)
        off = W * (1 - eye)
        reg = lam / (C * (C - 1)) * (off ** 2).sum() + mu / C * (b ** 2).sum()
        return nll_rows(lp @ W.T + b, yt).mean() + reg + ((u - u0t) ** 2).sum() / (2 * n)
    x, v, g = minimise(f, u0)
    return {"objective": v, "gradient": g}


DIRICHLET_CASES = [("full", 0.0, 0.0), ("full", 1e-2 * C * (C - 1), 1e-2 * C), ("diag", 0.0, 1e-2 * C), ("fixdiag", 0.0, 0.0)]


def main():
    files = make_files()
    out = {"classes": C, "calibration_rows": N_CAL, "test_rows": N_TEST, "files": {}}
    for name, (z, y, split) in files.items():
        cal = split == 1
        zc, yc = z[cal].astype(np.float64), y[cal]
        r = {"temp": fit_temp(zc, yc), "vector": fit_vector(zc, yc), "matrix": fit_matrix(zc, yc),
             "opvector": fit_opvector(zc, yc), "dirichlet": []}
        for variant, lam, mu in DIRICHLET_CASES:
            d = fit_dirichlet(zc, yc, variant, lam, mu)
            d.update({"variant": variant, "lambda": lam, "mu": mu})
            r["dirichlet"].append(d)
        out["files"][name] = r
        print(name, json.dumps(r, indent=1))
    with open("reference.json", "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
