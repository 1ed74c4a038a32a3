#!/usr/bin/python3
"""Build the small ONNX models that the infer tests run through ONNX Runtime.

Run from the repository root with Debian's python3-onnx and numpy:

    /usr/bin/python3 infer/testdata/gen_tiny.py

It rewrites, deterministically, in infer/testdata:

  tiny.onnx            x[batch,1,4,4] float32 -> Flatten -> Gemm(16->5) -> Relu
                       -> Gemm(5->3) -> logits[batch,3]; preprocessing metadata set.
  tiny_softmax.onnx    the same network followed by Softmax (outputs probabilities).
  tiny_nometa.onnx     the same network without any fedcalib.* metadata.
  tiny_fixed.onnx      the same network with a fixed batch dimension of 1.
  tiny_text.onnx       tokens[batch,6] int64 -> Gather(embedding 27x4) -> ReduceMean
                       over positions -> Gemm(4->3) -> logits[batch,3]; vocabulary metadata.
  tiny.json            the weights and preprocessing of tiny and tiny_text, so that the
                       Go tests compute the same networks independently.
  cnn.onnx             an MNIST CNN for the benchmark and the CNN test, with the
                       convolutions of a typical MNIST model (3.8M multiply-adds per
                       image) but a global average pool instead of a large dense layer,
                       to keep the file small:
                       image[batch,1,28,28] -> Conv(1->32,3x3,pad 1) -> Relu -> MaxPool(2)
                       -> Conv(32->64,3x3,pad 1) -> Relu -> MaxPool(2)
                       -> GlobalAveragePool -> Flatten -> Gemm(64->10) -> logits[batch,10].
                       Its weights follow the formula in cnn_weight below, which the
                       Go test repeats (exact in IEEE arithmetic), so no JSON is needed.
"""

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.dirname(os.path.abspath(__file__))
OPSET = 17
IR_VERSION = 8  # what Debian's onnx ships; ONNX Runtime 1.24 reads it

SCALE = "0.00392156862745098"  # 1/255
TEXT_VOCAB = " abcdefghijklmnopqrstuvwxyz"


def cnn_weight(k, shape, fan_in):
    """Parameter tensor number k (0-based, in graph order c1w,c1b,c2w,c2b,fw,fb).

    Element i (row-major) is ((i*7919 + k*104729) mod 2001 - 1000) / 1000 / sqrt(fan_in),
    computed in float64 and rounded to float32. fan_in is the number of inputs of
    one output unit of the layer (9 for c1, 288 for c2, 64 for f), the same
    for a layer's weight and its bias.
    """
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.int64)
    m = (i * 7919 + k * 104729) % 2001
    return (((m - 1000) / 1000.0) / np.sqrt(float(fan_in))).astype(np.float32).reshape(shape)


def save(model, name):
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(OUT, name))


def metadata(model, props):
    for k, v in props.items():
        p = model.metadata_props.add()
        p.key, p.value = k, v


def tiny_graph(softmax=False, batch="batch"):
    rng = np.random.default_rng(20261125)
    w1 = rng.uniform(-1, 1, size=(5, 16)).astype(np.float32)
    b1 = rng.uniform(-0.5, 0.5, size=(5,)).astype(np.float32)
    w2 = rng.uniform(-1, 1, size=(3, 5)).astype(np.float32)
    b2 = rng.uniform(-0.5, 0.5, size=(3,)).astype(np.float32)
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"], transB=1),
    ]
    out = "logits"
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=1))
        out = "probs"
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 4, 4])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, 3])],
        inits,
    )
    return graph, dict(w1=w1, b1=b1, w2=w2, b2=b2)


TINY_META = {
    "fedcalib.input.scale": SCALE,
    "fedcalib.input.mean": "0.5",
    "fedcalib.input.std": "0.25",
    "fedcalib.input.layout": "NCHW",
    "fedcalib.input.dtype": "float32",
    "fedcalib.classes": "zero,one,two",
}


def tiny_models():
    weights = None
    for name, softmax, meta, batch in (
        ("tiny.onnx", False, True, "batch"),
        ("tiny_softmax.onnx", True, True, "batch"),
        ("tiny_nometa.onnx", False, False, "batch"),
        ("tiny_fixed.onnx", False, True, 1),
    ):
        graph, w = tiny_graph(softmax=softmax, batch=batch)
        weights = w
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="fedcalib-gen_tiny")
        if meta:
            metadata(model, TINY_META)
        save(model, name)
    return weights


def tiny_text():
    rng = np.random.default_rng(7)
    emb = rng.uniform(-1, 1, size=(len(TEXT_VOCAB), 4)).astype(np.float32)
    w = rng.uniform(-1, 1, size=(3, 4)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, size=(3,)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["e"], axis=0),
        helper.make_node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=0),
        helper.make_node("Gemm", ["m", "w", "b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_text",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="fedcalib-gen_tiny")
    metadata(model, {
        "fedcalib.input.dtype": "int64",
        "fedcalib.input.layout": "NC",
        "fedcalib.input.vocab": TEXT_VOCAB,
    })
    save(model, "tiny_text.onnx")
    return dict(emb=emb, w=w, b=b)


def cnn():
    shapes = [(32, 1, 3, 3), (32,), (64, 32, 3, 3), (64,), (10, 64), (10,)]
    names = ["c1w", "c1b", "c2w", "c2b", "fw", "fb"]
    fan_ins = [9, 9, 288, 288, 64, 64]
    inits = [numpy_helper.from_array(cnn_weight(k, shape, fan_ins[k]), name)
             for k, (shape, name) in enumerate(zip(shapes, names))]
    nodes = [
        helper.make_node("Conv", ["image", "c1w", "c1b"], ["a1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2w", "c2b"], ["a2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fw", "fb"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="fedcalib-gen_tiny")
    metadata(model, {
        "fedcalib.input.scale": SCALE,
        "fedcalib.input.mean": "0.1307",
        "fedcalib.input.std": "0.3081",
        "fedcalib.input.layout": "NCHW",
        "fedcalib.input.dtype": "float32",
        "fedcalib.classes": ",".join(str(d) for d in range(10)),
    })
    save(model, "cnn.onnx")


def main():
    tiny = tiny_models()
    text = tiny_text()
    cnn()

    def flat(a):
        return [float(v) for v in np.asarray(a, dtype=np.float32).ravel()]

    doc = {
        "tiny": {
            "input": [1, 4, 4],
            "scale": 1.0 / 255.0, "mean": 0.5, "std": 0.25,
            "w1": flat(tiny["w1"]), "b1": flat(tiny["b1"]),
            "w2": flat(tiny["w2"]), "b2": flat(tiny["b2"]),
            "hidden": 5, "classes": 3,
        },
        "text": {
            "vocab": TEXT_VOCAB, "dim": 4, "length": 6,
            "emb": flat(text["emb"]), "w": flat(text["w"]), "b": flat(text["b"]),
            "classes": 3,
        },
    }
    with open(os.path.join(OUT, "tiny.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
