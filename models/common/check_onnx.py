#!/usr/bin/python3
"""Checks an exported model without torch: reads the ONNX file, applies the
preprocessing its metadata_props record to the raw uint8 images, runs the
graph with a small numpy interpreter (Conv, Relu, MaxPool, Flatten, Gemm —
the ops the MNIST recipes export), and compares accuracy and cwECE on the
partition's test rows with the figures in results.json.

  /usr/bin/python3 models/common/check_onnx.py models/mnist-tiny
"""

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fedrecipe as fr  # noqa: E402


def attrs(node):
    import onnx
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def conv(x, w, b, pads, strides):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (x.shape[2] - kh) // strides[0] + 1
    ow = (x.shape[3] - kw) // strides[1] + 1
    cols = np.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = x[:, :, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1]]
    out = np.tensordot(cols, w, axes=([1, 2, 3], [1, 2, 3])).transpose(0, 3, 1, 2)
    return out + b[None, :, None, None]


def maxpool(x, k, s):
    n, c, h, w = x.shape
    oh, ow = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
    out = np.full((n, c, oh, ow), -np.inf, dtype=x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            out = np.maximum(out, x[:, :, i:i + s[0] * oh:s[0], j:j + s[1] * ow:s[1]])
    return out


def run(model, x):
    import onnx.numpy_helper as nh
    env = {t.name: nh.to_array(t) for t in model.graph.initializer}
    env[model.graph.input[0].name] = x
    for node in model.graph.node:
        a = attrs(node)
        i = [env[n] for n in node.input]
        op = node.op_type
        if op == "Conv":
            y = conv(i[0], i[1], i[2], list(a.get("pads", [0, 0, 0, 0])), list(a.get("strides", [1, 1])))
        elif op == "Relu":
            y = np.maximum(i[0], 0)
        elif op == "MaxPool":
            if any(a.get("pads", [0])):
                raise NotImplementedError("MaxPool with pads")
            y = maxpool(i[0], list(a["kernel_shape"]), list(a.get("strides", a["kernel_shape"])))
        elif op == "Flatten":
            y = i[0].reshape(i[0].shape[0], -1)
        elif op == "Gemm":
            w = i[1].T if a.get("transB", 0) else i[1]
            y = a.get("alpha", 1.0) * (i[0] @ w) + a.get("beta", 1.0) * i[2]
        else:
            raise NotImplementedError(op)
        env[node.output[0]] = y.astype(np.float32)
    return env[model.graph.output[0].name]


def main(folder):
    import onnx
    res = json.load(open(os.path.join(folder, "results.json")))
    path = os.path.join(folder, res["onnx"]["file"])
    sha = fr.file_sha256(path)
    m = onnx.load(path)
    onnx.checker.check_model(m)
    meta = {p.key: p.value for p in m.metadata_props}
    scale = float(meta["fedcalib.input.scale"])
    mean = np.array([float(v) for v in meta["fedcalib.input.mean"].split(",")], dtype=np.float32)
    std = np.array([float(v) for v in meta["fedcalib.input.std"].split(",")], dtype=np.float32)
    assert meta["fedcalib.input.layout"] == "NCHW" and meta["fedcalib.input.dtype"] == "float32"
    classes = meta["fedcalib.classes"].split(",")
    ds = res["dataset"]
    data_dir = fr.gomnist_dir(os.path.dirname(os.path.dirname(HERE))) if ds == "mnist" else fr.FASHION_DIR
    images, labels = fr.load_idx_pair(data_dir)
    repo = os.path.dirname(os.path.dirname(HERE))
    part = fr.load_partition(os.path.join(repo, res["config"]["partition"]), labels)
    rows = part.rows(fr.SPLIT_TEST)
    x = ((images[rows].astype(np.float32) * np.float32(scale) - mean[0]) / std[0])[:, None]
    logits = np.concatenate([run(m, x[i:i + 500]) for i in range(0, len(x), 500)])
    got = fr.metrics(logits, labels[rows])
    want = res["final"]["test"]
    print(json.dumps({"file": path, "sha256": sha, "sha256_matches_results": sha == res["onnx"]["sha256"],
                      "opset": [o.version for o in m.opset_import], "classes": len(classes),
                      "numpy_test": got, "results_test": want}, indent=1))
    ok = sha == res["onnx"]["sha256"] and abs(got["accuracy"] - want["accuracy"]) < 1e-9 \
        and abs(got["cwece"] - want["cwece"]) < 1e-4
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
