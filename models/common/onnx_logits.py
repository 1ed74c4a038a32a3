#!/usr/bin/python3
"""Logits of a zoo model's exported ONNX file through Python's onnxruntime
(CPU), for a machine that has no Go toolchain (the GPU machine that trains
the ResNet18 recipes: models/gpu-zoo.sh).

Rows are the model's whole data set in fedcalib's row order (the recipe's
own loader, models/NAME/train.py TASK["load"], which reads the data as
fedcalib's readers do), and the input tensor is built by fedcalib's
preprocessing formula from the ONNX file's fedcalib.input.* metadata, with
the same float64 arithmetic rounded to float32 (infer/encode.go):

    8-bit pixels v:   float32((v*scale - mean[c]) / std[c])   (a lookup table)
    float records v:  float32(float64(v) * (scale/std[c]) + (-mean[c]/std[c]))

The output is a fedcalib logits file (.npz: logits float32 [N, C], labels
int64 [N], classes), which `go run ./cmd/zoo-logits pack --model-sha256 ...`
packs into models/logits/ where the ONNX file is not kept.

    python3 models/common/onnx_logits.py resnet18-cifar10 \\
        --model models/resnet18-cifar10/model.onnx --out /tmp/resnet18-cifar10.npz
"""
import argparse
import hashlib
import importlib.util
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.dirname(HERE)


def load_task(name):
    """TASK of models/NAME/train.py (imported, not run)."""
    path = os.path.join(MODELS, name, "train.py")
    spec = importlib.util.spec_from_file_location(f"zoo_train_{name.replace('-', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.TASK


def floats(meta, key, default, channels):
    """The per-channel values of a metadata key (one number or one per channel)."""
    if key not in meta:
        return [default] * channels
    v = [float(s) for s in meta[key].split(",")]
    if len(v) == 1:
        v = v * channels
    if len(v) != channels:
        sys.exit(f"{key}: {len(v)} values for {channels} channels")
    return v


def encode(x, meta):
    """x as fedcalib's encoder gives it to the model (NCHW records)."""
    if meta.get("fedcalib.input.layout", "NCHW") != "NCHW":
        sys.exit("only NCHW models are handled here")
    channels = x.shape[1]
    scale = float(meta.get("fedcalib.input.scale", "1"))
    mean = floats(meta, "fedcalib.input.mean", 0.0, channels)
    std = floats(meta, "fedcalib.input.std", 1.0, channels)
    out = np.empty(x.shape, dtype=np.float32)
    for c in range(channels):
        if x.dtype == np.uint8:
            lut = ((np.arange(256, dtype=np.float64) * scale - mean[c]) / std[c]).astype(np.float32)
            out[:, c] = lut[x[:, c]]
        else:
            a, b = scale / std[c], -mean[c] / std[c]
            out[:, c] = (x[:, c].astype(np.float32).astype(np.float64) * a + b).astype(np.float32)
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="zoo model name, e.g. resnet18-cifar10")
    p.add_argument("--model", required=True, help="the exported ONNX file")
    p.add_argument("--out", required=True, help="logits file to write (.npz)")
    p.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    p.add_argument("--batch", type=int, default=256, help="rows per Run")
    a = p.parse_args(argv)

    import onnx
    import onnxruntime as ort

    task = load_task(a.name)
    t0 = time.time()
    data = task["load"]()
    x, labels = data["x"], data["labels"]
    if x.ndim == 3:  # [N, H, W] grey records -> one channel
        x = x[:, None]
    m = onnx.load(a.model, load_external_data=False)
    meta = {p.key: p.value for p in m.metadata_props}
    del m
    classes = meta.get("fedcalib.classes", "").split(",") if "fedcalib.classes" in meta else data["classes"]
    opts = ort.SessionOptions()
    if a.threads:
        opts.intra_op_num_threads = a.threads
    sess = ort.InferenceSession(a.model, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    out = []
    for i in range(0, len(x), a.batch):
        out.append(sess.run(None, {name: encode(x[i:i + a.batch], meta)})[0].astype(np.float32))
    logits = np.concatenate(out)
    np.savez(a.out, logits=logits, labels=labels.astype(np.int64), classes=np.array(classes))
    h = hashlib.sha256()
    with open(a.model, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    info = {"name": a.name, "rows": int(len(labels)), "classes": int(logits.shape[1]),
            "model_sha256": h.hexdigest(), "onnxruntime": ort.__version__,
            "threads": a.threads, "batch": a.batch, "specs": data["specs"],
            "accuracy": float(np.mean(np.argmax(logits, 1) == labels)),
            "seconds": round(time.time() - t0, 1)}
    with open(a.out + ".json", "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
