#!/usr/bin/python3
"""Reference values for calib's tests, computed once by independent
optimisers (SciPy's L-BFGS-B and bounded scalar search, gradients by
PyTorch autograd in float64) and metric code (NumPy), so that CI needs no
Python.

Run from this directory:  /usr/bin/python3 make_reference.py
(or make_reference.py new: only the platt, beta and eqmass references,
added to the committed reference.json; needs scikit-learn).
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
  platt, beta: the sum over classes of each class's one-vs-rest mean
             cross-entropy + |theta_j - theta0_j|^2/(2n) (platt_mle and
             beta_mle: without that prior); see fit_platt, fit_beta
  dirichlet: + lam/(C(C-1)) sum_{i!=j} W_ij^2 + mu/C sum_j b_j^2 on the
             log-probabilities clamped at log 2^-52; the prior applies to
             the variant's free parameters.
"""
import json
import sys

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


def platt_targets(y, j):
    """Platt's smoothed one-vs-rest targets, as scikit-learn sets them."""
    pos = (y == j)
    n1 = pos.sum()
    n0 = len(y) - n1
    return np.where(pos, (n1 + 1.0) / (n1 + 2.0), 1.0 / (n0 + 2.0))


def logistic_objective(feat, t, x0, prior):
    """mean cross-entropy of sigmoid(feat @ x) against t, plus
    |x - x0|^2/(2n) when prior (calib's default Gaussian prior)."""
    ft, tt, x0t, n = torch.tensor(feat), torch.tensor(t), torch.tensor(x0), len(t)
    def f(x):
        u = ft @ x
        v = (torch.nn.functional.softplus(u) - tt * u).mean()
        if prior:
            v = v + ((x - x0t) ** 2).sum() / (2 * n)
        return v
    return f


def fit_platt(z, y, prior=True):
    """One-vs-rest Platt scaling: per class, sigmoid(a z_j + b) against
    Platt's targets. Objective: the sum over classes of each class's
    mean cross-entropy (+ prior). Without the prior, (a, b) also come
    from scikit-learn's own _sigmoid_calibration (A = -a, B = -b)."""
    from sklearn.calibration import _sigmoid_calibration
    total, a, b, sk_a, sk_b, grad = 0.0, [], [], [], [], 0.0
    for j in range(C):
        feat = np.stack([z[:, j], np.ones(len(y))], axis=1)
        f = logistic_objective(feat, platt_targets(y, j), np.array([1.0, 0.0]), prior)
        x, v, g = minimise(f, np.array([1.0, 0.0]))
        total += v
        grad = max(grad, g)
        a.append(float(x[0]))
        b.append(float(x[1]))
        if not prior:
            A, B = _sigmoid_calibration(z[:, j], (y == j).astype(int))
            sk_a.append(-float(A))
            sk_b.append(-float(B))
    out = {"objective": total, "gradient": grad, "a": a, "b": b}
    if not prior:
        out.update({"sklearn_a": sk_a, "sklearn_b": sk_b})
    return out


BETA_EPS = 2.0 ** -52


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def fit_beta(z, y, prior=True):
    """One-vs-rest beta calibration (Kull et al. 2017): per class,
    sigmoid(a ln s - b ln(1-s) + c), s the softmax probability clipped to
    [2^-52, 1 - 2^-52], a, b >= 0, by SciPy's L-BFGS-B with bounds
    (an optimiser independent of calib's active-set Newton), restarted
    until it stops improving. Objective as fit_platt's, targets 1[y=j],
    prior centre (1, 1, 0)."""
    p = np.clip(softmax(z), BETA_EPS, 1 - BETA_EPS)
    total, params, grad = 0.0, [], 0.0
    for j in range(C):
        s = p[:, j]
        feat = np.stack([np.log(s), -np.log(1 - s), np.ones(len(y))], axis=1)
        x0 = np.array([1.0, 1.0, 0.0])
        f = logistic_objective(feat, (y == j).astype(float), x0, prior)
        def fg(x):
            t = torch.tensor(x, requires_grad=True)
            v = f(t)
            v.backward()
            return v.item(), t.grad.numpy().copy()
        x, best = x0, None
        for _ in range(20):
            res = scipy.optimize.minimize(fg, x, jac=True, method="L-BFGS-B", bounds=[(0, None), (0, None), (None, None)],
                                          options={"maxiter": 100000, "maxfun": 200000, "ftol": 1e-16, "gtol": 1e-14, "maxcor": 30})
            if best is not None and res.fun >= best - 1e-17:
                break
            x, best = res.x, res.fun
        v, g = fg(x)
        pg = [g[0] if x[0] > 0 else min(g[0], 0), g[1] if x[1] > 0 else min(g[1], 0), g[2]]
        total += v
        grad = max(grad, float(np.abs(pg).max()))
        params.append([float(t) for t in x])
    return {"objective": total, "gradient": grad, "a": [q[0] for q in params], "b": [q[1] for q in params], "c": [q[2] for q in params]}


def fit_eqmass(z, y, zt, yt, fine=1024, bins=100):
    """Equal-mass binning on the fine grid of calib.EqualMass, written
    independently with NumPy: per class, fine-bin counts of the softmax
    probability, equal-mass edges where the cumulative count first
    exceeds k n / bins, the positive rate per equal-mass bin; returns the
    test rows' mean NLL and Brier score of the normalised predictions."""
    p, pt = softmax(z), softmax(zt)
    g = np.empty_like(pt)
    for j in range(C):
        idx = np.minimum(np.floor(p[:, j] * fine), fine - 1).astype(int)
        cnt = np.bincount(idx, minlength=fine).astype(float)
        pos = np.bincount(idx, weights=(y == j).astype(float), minlength=fine)
        cum = np.concatenate([[0.0], np.cumsum(cnt)])
        n = cum[-1]
        # largest e <= fine-1 with cum[e] <= k n / bins
        edges = [0] + [min(int(np.searchsorted(cum, k * n / bins, side="right")) - 1, fine - 1) for k in range(1, bins)] + [fine]
        table = np.full(fine, -1.0)
        for k in range(bins):
            lo, hi = edges[k], edges[k + 1]
            if hi > lo and cnt[lo:hi].sum() > 0:
                table[lo:hi] = pos[lo:hi].sum() / cnt[lo:hi].sum()
        ti = np.minimum(np.floor(pt[:, j] * fine), fine - 1).astype(int)
        v = table[ti]
        g[:, j] = np.where(v < 0, pt[:, j], v)
    sums = g.sum(axis=1, keepdims=True)
    q = np.where(sums > 0, g / np.where(sums > 0, sums, 1), pt)
    nll = -np.log(np.maximum(q[np.arange(len(yt)), yt], 1e-12)).mean()
    onehot = np.eye(C)[yt]
    return {"test_nll": float(nll), "test_brier": float(((q - onehot) ** 2).sum(axis=1).mean()), "bins": bins, "fine_bins": fine}


def new_calibrators(zc, yc, zt, yt):
    """The references of platt, beta and eqmass (issue #28)."""
    return {"platt": fit_platt(zc, yc), "platt_mle": fit_platt(zc, yc, prior=False),
            "beta": fit_beta(zc, yc), "beta_mle": fit_beta(zc, yc, prior=False),
            "eqmass": fit_eqmass(zc, yc, zt, yt)}


DIRICHLET_CASES = [("full", 0.0, 0.0), ("full", 1e-2 * C * (C - 1), 1e-2 * C), ("diag", 0.0, 1e-2 * C), ("fixdiag", 0.0, 0.0)]


def main():
    files = make_files()
    if sys.argv[1:] == ["new"]:
        # Only the new calibrators' references, into the committed file.
        with open("reference.json") as fh:
            out = json.load(fh)
        for name, (z, y, split) in files.items():
            zc, yc = z[split == 1].astype(np.float64), y[split == 1]
            zt, yt = z[split == 2].astype(np.float64), y[split == 2]
            out["files"][name].update(new_calibrators(zc, yc, zt, yt))
        with open("reference.json", "w") as fh:
            json.dump(out, fh, indent=1)
            fh.write("\n")
        return
    out = {"classes": C, "calibration_rows": N_CAL, "test_rows": N_TEST, "files": {}}
    for name, (z, y, split) in files.items():
        cal = split == 1
        zc, yc = z[cal].astype(np.float64), y[cal]
        zt, yt = z[split == 2].astype(np.float64), y[split == 2]
        r = {"temp": fit_temp(zc, yc), "vector": fit_vector(zc, yc), "matrix": fit_matrix(zc, yc),
             "opvector": fit_opvector(zc, yc), "dirichlet": []}
        for variant, lam, mu in DIRICHLET_CASES:
            d = fit_dirichlet(zc, yc, variant, lam, mu)
            d.update({"variant": variant, "lambda": lam, "mu": mu})
            r["dirichlet"].append(d)
        r.update(new_calibrators(zc, yc, zt, yt))
        out["files"][name] = r
        print(name, json.dumps(r, indent=1))
    with open("reference.json", "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
