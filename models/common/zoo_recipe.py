"""The recipe driver of the CIFAR-10, FEMNIST and Shakespeare models: load
the rows (zoo_data, in fedcalib's record order), read the partition file that
`fedcalib partition` wrote, FedAvg (fedrecipe.fedavg) on the clients' train
splits, measure on the union of the clients' test (and calibration) splits,
export ONNX with the preprocessing in metadata_props, write results.json.

A model's train.py passes a task dict:

  name, description      model name, ONNX doc string
  load()                 -> dict(x, labels, classes, specs); x is the raw
                         numpy input (uint8 pixels or tokens, or floats)
  transform(torch, xb)   batch of x -> model input tensor
  build(torch)           -> the torch.nn.Module (output = logits)
  dummy(torch)           -> example input for the ONNX export
  base_meta              fedcalib.input.* keys (None: fedrecipe's default)
  mean, std              for the default metadata (images scaled by 1/255)
  loss_fn(model, xb, yb) optional training loss (default cross-entropy of
                         the logits)
  write_eval(rows, path) optional: write the final test rows as a data file
                         fedcalib reads (when the full data is too large to
                         infer on this machine)
  partition              default partition file
  defaults               FedAvg hyperparameters (see --help)

and every default can be overridden on the command line. The output folder
(default: the model's folder) gets model.onnx and results.json, the same
results.json layout as the MNIST recipes (card_numbers.py prints it).
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


def parse(argv, task):
    d = task["defaults"]
    p = argparse.ArgumentParser(description=task["description"],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--partition", default=task["partition"],
                   help="partition file written by `fedcalib partition` (.json or .json.gz)")
    p.add_argument("--rounds", type=int, default=d["rounds"], help="FedAvg rounds T")
    p.add_argument("--sample-rate", type=float, default=d["sample_rate"],
                   help="Poisson client sampling rate q")
    p.add_argument("--local-epochs", type=int, default=d["local_epochs"])
    p.add_argument("--batch-size", type=int, default=d["batch_size"])
    p.add_argument("--client-lr", type=float, default=d["client_lr"])
    p.add_argument("--momentum", type=float, default=d.get("momentum", 0.0))
    p.add_argument("--server-lr", type=float, default=d["server_lr"])
    p.add_argument("--max-client-rows", type=int, default=d.get("max_client_rows"),
                   help="cap on the train rows a participant visits per round (random subset; "
                        "default: all)")
    p.add_argument("--eval-max-rows", type=int, default=d.get("eval_max_rows"),
                   help="evaluate during training on a fixed random subset of this many test rows "
                        "(default: all); the final figures always use all rows unless "
                        "--final-max-rows is set")
    p.add_argument("--final-max-rows", type=int, default=d.get("final_max_rows"),
                   help="final metrics on a fixed random subset of this many rows per split "
                        "(default: all)")
    p.add_argument("--seed", type=int, default=d.get("seed", 1), help="training seed")
    p.add_argument("--threads", type=int, default=d.get("threads", 1),
                   help="torch CPU threads (1: on the shared 2-core machine 2 threads ran 2-18x slower)")
    p.add_argument("--eval-every", type=int, default=d.get("eval_every", 10),
                   help="rounds between test evaluations")
    p.add_argument("--eval-data-out", default=None,
                   help="where write_eval puts the final test rows (default: the cache folder, "
                        "never the repository)")
    p.add_argument("--device", default="cpu",
                   help="torch device to train and evaluate on, e.g. cuda (the export is made "
                        "from a CPU copy)")
    p.add_argument("--out", default=task["out"], help="output folder")
    p.add_argument("--onnx-name", default="model.onnx")
    return p.parse_args(argv)


def subset(rows, k, seed):
    """A fixed, sorted random subset of k rows (all rows when k is None)."""
    if k is None or len(rows) <= k:
        return rows
    return np.sort(np.random.default_rng([seed, 7]).choice(rows, size=k, replace=False))


def main(argv, task):
    a = parse(argv, task)
    import torch

    fr.set_determinism(torch, a.seed, a.threads, cuda=a.device.startswith("cuda"))
    t_load = time.time()
    data = task["load"]()
    x, labels = data["x"], data["labels"]
    print(f"data: {task['name']} x {x.shape} {x.dtype}, {len(labels)} rows, "
          f"{time.time() - t_load:.0f}s to load; fedcalib specs in row order: {data['specs']}",
          flush=True)
    part = fr.load_partition(a.partition, labels)
    psum = part.summary()
    print("partition:", json.dumps(psum), flush=True)

    xt = torch.from_numpy(x)

    def tf(xb):
        return task["transform"](torch, xb)

    def predict(rows, batch=500):
        model.eval()
        dev = next(model.parameters()).device
        out = []
        with torch.no_grad():
            for i in range(0, len(rows), batch):
                xb = xt[torch.from_numpy(rows[i:i + batch])].to(dev)
                out.append(model(tf(xb)).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, len(data["classes"])), np.float32)

    test_rows = part.rows(fr.SPLIT_TEST)
    cal_rows = part.rows(fr.SPLIT_CALIBRATION)
    eval_rows = subset(test_rows, a.eval_max_rows, a.seed)

    model = task["build"](torch)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"model: {nparams} parameters", flush=True)

    def evaluate():
        m = fr.metrics(predict(eval_rows), labels[eval_rows])
        return {"test_accuracy": round(m["accuracy"], 4), "test_cwece": round(m["cwece"], 4)}

    if a.device != "cpu":
        model.to(a.device)
    t0 = time.time()
    history = fr.fedavg(torch, model, x, labels, part.client_train_rows(),
                        rounds=a.rounds, sample_rate=a.sample_rate, local_epochs=a.local_epochs,
                        batch_size=a.batch_size, client_lr=a.client_lr, server_lr=a.server_lr,
                        momentum=a.momentum, seed=a.seed, eval_fn=evaluate,
                        eval_every=a.eval_every, log=lambda s: print(s, flush=True),
                        batch_transform=tf, max_client_rows=a.max_client_rows,
                        loss_fn=task.get("loss_fn"), device=None if a.device == "cpu" else a.device)
    train_seconds = time.time() - t0
    if a.device != "cpu":
        # the final evaluation in full float32 (training keeps cuDNN's TF32 default)
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False

    fin_test = subset(test_rows, a.final_max_rows, a.seed + 1)
    fin_cal = subset(cal_rows, a.final_max_rows, a.seed + 2)
    final = {
        "test": fr.metrics(predict(fin_test), labels[fin_test]),
        "calibration": fr.metrics(predict(fin_cal), labels[fin_cal]),
    }
    model.to("cpu")
    os.makedirs(a.out, exist_ok=True)
    onnx_path = os.path.join(a.out, a.onnx_name)
    config = {k: v for k, v in vars(a).items() if k not in ("out", "onnx_name", "device")}
    if config["partition"]:
        config["partition"] = os.path.relpath(os.path.abspath(config["partition"]), REPO)
    sha = fr.export_onnx(
        torch, model, onnx_path, classes=data["classes"], mean=task.get("mean", 0.0),
        std=task.get("std", 1.0), doc=task["description"], dummy=task["dummy"](torch),
        base_meta=task.get("base_meta"),
        extra_meta={
            "fedcalib.model.name": task["name"],
            "fedcalib.model.recipe": f"models/{task['name']}/train.py",
            "fedcalib.train.data": " then ".join(
                s.replace(os.path.dirname(s.split(":")[1]) + "/", "") for s in data["specs"]),
            "fedcalib.train.partition": psum["source"],
            "fedcalib.train.seed": str(a.seed),
        })
    results = {
        "name": task["name"],
        "dataset": task["name"].split("-")[0],
        "specs": data["specs"],
        "parameters": nparams,
        "config": config,
        "partition": psum,
        "final": final,
        "final_rows": {"test": int(len(fin_test)), "calibration": int(len(fin_cal)),
                       "test_all": int(len(test_rows)), "calibration_all": int(len(cal_rows))},
        "history": history,
        "onnx": {"file": a.onnx_name, "bytes": os.path.getsize(onnx_path), "sha256": sha},
        "train_seconds": round(train_seconds, 1),
        "environment": {"torch": torch.__version__, "numpy": np.__version__,
                        "python": platform.python_version(), "machine": platform.machine(),
                        "threads": a.threads,
                        "train_device": a.device if a.device == "cpu" else
                        f"{a.device} ({torch.cuda.get_device_name(torch.device(a.device))})"},
    }
    if task.get("write_eval"):
        import zoo_data
        ev = a.eval_data_out or os.path.join(zoo_data.cache_dir(), f"{task['name']}-test-subset.json")
        spec = task["write_eval"](data, fin_test, ev)
        results["eval_data"] = {"spec": spec, "rows": int(len(fin_test)),
                                "note": "the final test rows, in row order, as a file fedcalib reads"}
        print(f"final test rows written for fedcalib: {spec}", flush=True)
    fr.write_results(a.out, results)
    t, c = final["test"], final["calibration"]
    print(f"done in {train_seconds:.0f}s: test acc {t['accuracy']:.4f} cwECE {t['cwece']:.4f} "
          f"ECE {t['ece']:.4f} NLL {t['nll']:.4f} (n={t['n']}); calibration acc "
          f"{c['accuracy']:.4f} cwECE {c['cwece']:.4f}; {onnx_path} "
          f"({os.path.getsize(onnx_path)} bytes) sha256 {sha}", flush=True)
