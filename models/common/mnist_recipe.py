"""The MNIST-family recipe: load the 70,000 rows, partition, FedAvg, export.

A model's train.py builds its network and calls main() with its defaults;
every default can be overridden from the command line (see --help). The run
writes, into --out (default: the model's folder):

  model.onnx     the exported network (opset 17, logits, preprocessing in
                 metadata_props)
  results.json   the configuration, partition summary, per-round history,
                 final metrics on the union of the clients' test splits and
                 calibration splits, the ONNX sha256 and the training time
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fedrecipe as fr  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))


def parse(argv, defaults):
    p = argparse.ArgumentParser(description=defaults["description"],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", default=None,
                   help="folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz "
                        "(default: the GoMNIST Go module for MNIST, "
                        f"{fr.FASHION_DIR} for Fashion-MNIST)")
    p.add_argument("--partition", default=defaults.get("partition"),
                   help="partition file written by `fedcalib partition` (.json or .json.gz; "
                        "`make -f models/Makefile partitions` makes the default one)")
    p.add_argument("--rounds", type=int, default=defaults["rounds"], help="FedAvg rounds T")
    p.add_argument("--sample-rate", type=float, default=defaults["sample_rate"],
                   help="Poisson client sampling rate q")
    p.add_argument("--local-epochs", type=int, default=defaults["local_epochs"],
                   help="local epochs a participant runs each round")
    p.add_argument("--batch-size", type=int, default=defaults["batch_size"],
                   help="local minibatch size B")
    p.add_argument("--client-lr", type=float, default=defaults["client_lr"],
                   help="local SGD learning rate eta_C")
    p.add_argument("--momentum", type=float, default=defaults.get("momentum", 0.0),
                   help="local SGD momentum (state reset every round)")
    p.add_argument("--server-lr", type=float, default=defaults["server_lr"],
                   help="server learning rate eta_S applied to the mean client delta")
    p.add_argument("--seed", type=int, default=defaults.get("seed", 1), help="training seed")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (1: on a shared machine 2 threads ran 10x slower)")
    p.add_argument("--eval-every", type=int, default=10, help="rounds between test evaluations")
    p.add_argument("--out", default=defaults["out"], help="output folder")
    p.add_argument("--onnx-name", default="model.onnx", help="file name of the exported model")
    return p.parse_args(argv)


def main(argv, defaults, build_model):
    a = parse(argv, defaults)
    import torch

    fr.set_determinism(torch, a.seed, a.threads)
    dataset = defaults["dataset"]
    data_dir = a.data_dir
    if data_dir is None:
        data_dir = fr.gomnist_dir(REPO) if dataset == "mnist" else fr.FASHION_DIR
    images, labels = fr.load_idx_pair(data_dir)
    print(f"data: {dataset} {images.shape} from {data_dir}", flush=True)

    if not os.path.exists(a.partition):
        sys.exit(f"partition {a.partition}: no such file; make it with "
                 "`make -f models/Makefile partitions` (fedcalib partition)")
    part = fr.load_partition(a.partition, labels)
    if len(part.client) != len(labels):
        sys.exit(f"partition {a.partition}: has {len(part.client)} rows, data has {len(labels)}")
    psum = part.summary()
    print("partition:", json.dumps(psum), flush=True)

    mean, std = defaults["mean"], defaults["std"]
    x = fr.preprocess(images, mean, std)
    test_rows = part.rows(fr.SPLIT_TEST)
    cal_rows = part.rows(fr.SPLIT_CALIBRATION)

    model = build_model(torch)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"model: {nparams} parameters", flush=True)

    def evaluate():
        lg = fr.predict(torch, model, x[test_rows])
        m = fr.metrics(lg, labels[test_rows])
        return {"test_accuracy": round(m["accuracy"], 4), "test_cwece": round(m["cwece"], 4)}

    t0 = time.time()
    history = fr.fedavg(torch, model, x, labels, part.client_train_rows(),
                        rounds=a.rounds, sample_rate=a.sample_rate, local_epochs=a.local_epochs,
                        batch_size=a.batch_size, client_lr=a.client_lr, server_lr=a.server_lr,
                        momentum=a.momentum, seed=a.seed, eval_fn=evaluate,
                        eval_every=a.eval_every,
                        log=lambda s: print(s, flush=True))
    train_seconds = time.time() - t0

    final = {
        "test": fr.metrics(fr.predict(torch, model, x[test_rows]), labels[test_rows]),
        "calibration": fr.metrics(fr.predict(torch, model, x[cal_rows]), labels[cal_rows]),
    }
    os.makedirs(a.out, exist_ok=True)
    onnx_path = os.path.join(a.out, a.onnx_name)
    config = {k: v for k, v in vars(a).items() if k not in ("out", "onnx_name", "data_dir")}
    # repository-relative, so that results.json is portable
    config["partition"] = os.path.relpath(os.path.abspath(a.partition), REPO)
    sha = fr.export_onnx(
        torch, model, onnx_path, classes=defaults["classes"], mean=mean, std=std,
        doc=defaults["description"],
        extra_meta={
            "fedcalib.model.name": defaults["name"],
            "fedcalib.model.recipe": f"models/{defaults['name']}/train.py",
            "fedcalib.train.partition": psum["source"],
            "fedcalib.train.seed": str(a.seed),
        })
    results = {
        "name": defaults["name"],
        "dataset": dataset,
        # the fedcalib dataset spec of the same rows in the same order
        # (common/fedcalib_verify.py runs `fedcalib infer` on it)
        "specs": [f"{dataset}:{os.path.abspath(data_dir)}:all"],
        "parameters": nparams,
        "config": config,
        "partition": psum,
        "final": final,
        "history": history,
        "onnx": {"file": a.onnx_name, "bytes": os.path.getsize(onnx_path), "sha256": sha},
        "train_seconds": round(train_seconds, 1),
        "environment": {"torch": torch.__version__, "numpy": np.__version__,
                        "python": platform.python_version(), "machine": platform.machine(),
                        "threads": a.threads},
    }
    fr.write_results(a.out, results)
    t, c = final["test"], final["calibration"]
    print(f"done in {train_seconds:.0f}s: test acc {t['accuracy']:.4f} cwECE {t['cwece']:.4f} "
          f"ECE {t['ece']:.4f} NLL {t['nll']:.4f} (n={t['n']}); calibration acc "
          f"{c['accuracy']:.4f} cwECE {c['cwece']:.4f}; {onnx_path} sha256 {sha}", flush=True)
