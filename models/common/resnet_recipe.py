"""The ResNet18 recipes' driver: the same FedAvg (fedrecipe.fedavg), partition
files, metrics, ONNX export and results.json layout as zoo_recipe.py, made
resumable, because a ResNet18 needs hours of CPU per run on this project's
2-core machine.

  * After every round the global weights, the round number, the RNG states,
    the per-round history (accuracy curve) and the training time so far are
    saved atomically (temp file, then rename) to
    CACHE/ckpt.pt, CACHE = --cache-dir (default ~/.cache/fedcalib/train/NAME).
  * On start, training resumes from CACHE/ckpt.pt when it exists (its
    training hyperparameters must equal the command line's). The client
    draws of round t depend only on the seed and t, so a resumed run is the
    same run as an uninterrupted one.
  * --max-rounds N stops after N rounds of this invocation; --deadline-minutes
    M stops before a round that would end more than M minutes after the
    start (estimated from this invocation's mean round time). Either way,
    and when all --rounds are done, the checkpoint is evaluated on all test
    and calibration rows and exported (model.onnx, results.json in --out).
  * --export-only exports the current checkpoint without training, so a
    card can be written at any time (also while a training run goes on: it
    reads the last completed round).
  * One line per round goes to stdout and is appended to CACHE/rounds.jsonl.
  * --device cuda trains on a GPU (the data and the model move there once;
    client draws and minibatch orders are the same as on the CPU), with
    --checkpoint-every N to save every N rounds (and always at the round
    training stops). The final evaluation and the export always run on the
    CPU, so the card's numbers come from the arithmetic fedcalib's CPU
    inference does. models/gpu-zoo.sh runs the ResNet18 recipes so.

A model's train.py passes a task dict like zoo_recipe's:

  name, description      model name, ONNX doc string
  load()                 -> dict(x, labels, classes, specs); x is uint8 NCHW
  transform(torch, xb)   batch of x -> normalised float32 model input
  build(torch)           -> the torch.nn.Module (output = logits)
  dummy(torch)           -> example input for the ONNX export
  mean, std              for the fedcalib.input.* metadata (scale 1/255)
  base_meta              optional: the fedcalib.input.* keys when scale 1/255
                         with mean and std does not describe the input
  partition              default partition file
  defaults               FedAvg hyperparameters (see --help)
  out                    default output folder (the model's folder)
"""

import argparse
import copy
import json
import os
import platform
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fedrecipe as fr  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
CKPT_FORMAT = "fedcalib.resnet-ckpt/v1"
# hyperparameters a checkpoint must share with the command line to be resumed
TRAIN_KEYS = ("partition", "sample_rate", "local_epochs", "batch_size", "client_lr",
              "momentum", "server_lr", "seed", "max_client_rows", "channels_last")


# ---------------------------------------------------------------- network


def resnet18_cifar(torch, in_channels, num_classes):
    """ResNet18 (He et al. 2016) in its usual CIFAR form: a 3x3 stride-1 stem
    convolution (64 channels) + BatchNorm + ReLU and no max-pool, then four
    stages of two BasicBlocks each (64, 128, 256, 512 channels; stride 1, 2,
    2, 2; 1x1 stride-2 convolution + BatchNorm on the shortcut where the
    shape changes), global average pooling and a linear head. Convolutions
    have no bias (BatchNorm follows each). 11.17 M parameters for 10
    classes."""
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                              nn.BatchNorm2d(cout))

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + self.shortcut(x))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            x = torch.relu(self.bn1(self.conv1(x)))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.pool(x), 1))

    return ResNet18()


# ---------------------------------------------------------------- command line


def parse(argv, task):
    d = task["defaults"]
    p = argparse.ArgumentParser(description=task["description"],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--partition", default=task["partition"],
                   help="partition file written by `fedcalib partition` (.json or .json.gz)")
    p.add_argument("--rounds", type=int, default=d["rounds"], help="FedAvg rounds T (the schedule)")
    p.add_argument("--sample-rate", type=float, default=d["sample_rate"],
                   help="Poisson client sampling rate q")
    p.add_argument("--local-epochs", type=int, default=d["local_epochs"])
    p.add_argument("--batch-size", type=int, default=d["batch_size"])
    p.add_argument("--client-lr", type=float, default=d["client_lr"])
    p.add_argument("--momentum", type=float, default=d.get("momentum", 0.0))
    p.add_argument("--server-lr", type=float, default=d["server_lr"])
    p.add_argument("--max-client-rows", type=int, default=d.get("max_client_rows"),
                   help="cap on the train rows a participant visits per round (random subset; "
                        "default: all; for smoke tests)")
    p.add_argument("--seed", type=int, default=d.get("seed", 1), help="training seed")
    p.add_argument("--threads", type=int, default=d.get("threads", 1),
                   help="torch CPU threads (1: on the shared 2-core machine one SGD step of "
                        "ResNet18 on 64 MNIST images took 1.8-2.8 s with 1 thread, 3.4-4.4 s with 2)")
    p.add_argument("--device", default="cpu",
                   help="torch device for training (cpu, cuda); the final evaluation and "
                        "the export run on the CPU")
    p.add_argument("--checkpoint-every", type=int, default=1,
                   help="save the checkpoint every N rounds and at the round training stops")
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false",
                   help="keep NCHW-contiguous tensors (channels_last is faster on CPU; "
                        "the model is the same)")
    p.add_argument("--eval-every", type=int, default=d.get("eval_every", 5),
                   help="rounds between test evaluations during training")
    p.add_argument("--eval-max-rows", type=int, default=d.get("eval_max_rows"),
                   help="evaluate during training on a fixed random subset of this many test "
                        "rows (default: all)")
    p.add_argument("--final-max-rows", type=int, default=None,
                   help="final metrics on a fixed random subset of this many rows per split "
                        "(default: all; for smoke tests)")
    p.add_argument("--max-rounds", type=int, default=None,
                   help="stop after this many rounds of this invocation, then export")
    p.add_argument("--deadline-minutes", type=float, default=None,
                   help="do not start a round expected to end later than this many minutes "
                        "after the start; then export")
    p.add_argument("--export-only", action="store_true",
                   help="no training: evaluate and export the checkpoint, write results.json")
    p.add_argument("--no-export", action="store_true",
                   help="when training stops, keep the checkpoint only (no evaluation or export)")
    p.add_argument("--cache-dir", default=None,
                   help="checkpoint folder (default ~/.cache/fedcalib/train/NAME)")
    p.add_argument("--out", default=task["out"], help="folder for model.onnx and results.json")
    p.add_argument("--onnx-name", default="model.onnx")
    return p.parse_args(argv)


def subset(rows, k, seed):
    """A fixed, sorted random subset of k rows (all rows when k is None)."""
    if k is None or len(rows) <= k:
        return rows
    return np.sort(np.random.default_rng([seed, 7]).choice(rows, size=k, replace=False))


def train_config(a):
    c = {k: getattr(a, k) for k in TRAIN_KEYS}
    c["partition"] = os.path.relpath(os.path.abspath(a.partition), REPO)
    return c


def save_atomic(torch, obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(torch, path):
    if not os.path.exists(path):
        return None
    # weights_only=False: the checkpoint holds RNG states and the history
    # beside the tensors (newer torch loads weights only by default)
    ck = torch.load(path, map_location="cpu", weights_only=False)
    if ck.get("format") != CKPT_FORMAT:
        sys.exit(f"{path}: format {ck.get('format')!r}, want {CKPT_FORMAT!r}")
    return ck


def device_name(torch, device):
    """The training device in words (the GPU's name for cuda)."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return device


# ---------------------------------------------------------------- main


def main(argv, task):
    a = parse(argv, task)
    t_start = time.time()
    import torch

    if a.checkpoint_every < 1:
        sys.exit("--checkpoint-every must be at least 1")
    fr.set_determinism(torch, a.seed, a.threads, cuda=a.device.startswith("cuda"))
    cache = a.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "fedcalib", "train",
                                        task["name"])
    os.makedirs(cache, exist_ok=True)
    ckpt_path = os.path.join(cache, "ckpt.pt")
    rounds_log = os.path.join(cache, "rounds.jsonl")
    config = train_config(a)

    t_load = time.time()
    data = task["load"]()
    x, labels = data["x"], data["labels"]
    print(f"data: {task['name']} x {x.shape} {x.dtype}, {len(labels)} rows, "
          f"{time.time() - t_load:.0f}s to load; fedcalib specs in row order: {data['specs']}",
          flush=True)
    part = fr.load_partition(a.partition, labels)
    psum = part.summary()
    print("partition:", json.dumps(psum), flush=True)

    model = task["build"](torch)
    nparams = sum(p.numel() for p in model.parameters())
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)

    ck = load_checkpoint(torch, ckpt_path)
    start_round, history, train_seconds, train_device = 0, [], 0.0, device_name(torch, a.device)
    if ck is not None:
        diff = {k: (ck["config"].get(k), config[k]) for k in TRAIN_KEYS
                if ck["config"].get(k) != config[k]}
        if diff:
            sys.exit(f"{ckpt_path}: made with other settings {diff} (checkpoint, command line); "
                     "use another --cache-dir or remove it")
        model.load_state_dict(ck["state_dict"])
        torch.set_rng_state(ck["torch_rng_state"])
        random.setstate(ck["python_rng_state"])
        start_round, history, train_seconds = ck["round"], ck["history"], ck["train_seconds"]
        train_device = ck.get("train_device", "cpu")
        print(f"resumed from {ckpt_path}: round {start_round}, {train_seconds:.0f}s of training",
              flush=True)
    elif a.export_only:
        sys.exit(f"--export-only: no checkpoint at {ckpt_path}")
    print(f"model: {nparams} parameters; {a.threads} torch threads; device {a.device}; "
          f"channels_last={a.channels_last}; checkpoint {ckpt_path}", flush=True)

    xt = torch.from_numpy(x)
    xdev = {"cpu": xt}

    def tf(xb):
        return task["transform"](torch, xb).contiguous(memory_format=fmt)

    def predict(rows, batch=500):
        """Logits of rows, on the device the model is on."""
        model.eval()
        dev = next(model.parameters()).device
        key = str(dev)
        if key not in xdev:
            xdev[key] = xt.to(dev)
        xs = xdev[key]
        out = []
        with torch.inference_mode():
            for i in range(0, len(rows), batch):
                idx = torch.from_numpy(rows[i:i + batch]).to(dev)
                out.append(model(tf(xs[idx])).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, len(data["classes"])), np.float32)

    test_rows = part.rows(fr.SPLIT_TEST)
    cal_rows = part.rows(fr.SPLIT_CALIBRATION)
    eval_rows = subset(test_rows, a.eval_max_rows, a.seed)

    def evaluate():
        m = fr.metrics(predict(eval_rows), labels[eval_rows])
        # plain floats: the checkpoint must load with another numpy (a GPU
        # machine's checkpoint is exported on this one)
        return {"test_accuracy": round(float(m["accuracy"]), 4),
                "test_cwece": round(float(m["cwece"]), 4)}

    stopped = ck.get("stopped", "export-only") if ck else "export-only"
    if not a.export_only and start_round < a.rounds:
        model.to(a.device)
        state = {"ran": 0, "t_run": time.time(), "last": time.time(), "stop": "completed"}

        def after_round(r, hist, sample_rng):
            now = time.time()
            rec = dict(hist[-1])
            rec["round_seconds"] = round(now - state["last"], 1)
            state["last"] = now
            state["ran"] += 1
            secs = train_seconds + (now - state["t_run"])
            hist[-1]["seconds"] = round(secs, 1)
            rec["seconds"] = round(secs, 1)
            stop = False
            if a.max_rounds is not None and state["ran"] >= a.max_rounds:
                state["stop"] = f"max-rounds ({a.max_rounds})"
                stop = True
            elif a.deadline_minutes is not None and r < a.rounds:
                per_round = (now - state["t_run"]) / state["ran"]
                if now + per_round > t_start + 60 * a.deadline_minutes:
                    state["stop"] = f"deadline ({a.deadline_minutes} min)"
                    stop = True
            if stop or r % a.checkpoint_every == 0 or r == a.rounds:
                sd = {n: t.detach().cpu().contiguous().clone()
                      for n, t in model.state_dict().items()}
                save_atomic(torch, {
                    "format": CKPT_FORMAT, "name": task["name"], "round": r, "state_dict": sd,
                    "history": hist, "train_seconds": secs, "config": config,
                    "sample_rng_state": sample_rng.bit_generator.state,
                    "torch_rng_state": torch.get_rng_state(),
                    "python_rng_state": random.getstate(),
                    "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "torch": torch.__version__,
                    "train_device": device_name(torch, a.device),
                    "stopped": state["stop"] if stop else "interrupted",
                }, ckpt_path)
            line = json.dumps(rec)
            print(line, flush=True)
            with open(rounds_log, "a") as f:
                f.write(line + "\n")
            return stop

        fr.fedavg(torch, model, x, labels, part.client_train_rows(),
                  rounds=a.rounds, sample_rate=a.sample_rate, local_epochs=a.local_epochs,
                  batch_size=a.batch_size, client_lr=a.client_lr, server_lr=a.server_lr,
                  momentum=a.momentum, seed=a.seed, eval_fn=evaluate,
                  eval_every=a.eval_every, log=lambda s: None, batch_transform=tf,
                  max_client_rows=a.max_client_rows, start_round=start_round,
                  history=history, after_round=after_round, seconds_offset=train_seconds,
                  device=None if a.device == "cpu" else a.device)
        model.to("cpu")
        stopped = state["stop"]
        ck = load_checkpoint(torch, ckpt_path)
        history, train_seconds = ck["history"], ck["train_seconds"]
        train_device = ck.get("train_device", a.device)
        print(f"stopped: {stopped} after round {ck['round']} ({state['ran']} rounds this run)",
              flush=True)
        if a.no_export:
            return
    elif start_round >= a.rounds:
        stopped = "completed"
    rounds_run = history[-1]["round"] if history else 0
    if rounds_run == 0:
        sys.exit("no round has been run: nothing to export")

    t_eval = time.time()
    fin_test = subset(test_rows, a.final_max_rows, a.seed + 1)
    fin_cal = subset(cal_rows, a.final_max_rows, a.seed + 2)
    # --device cuda: the final evaluation on the GPU too (full float32: no
    # TF32); the export is made from the CPU copy as always
    eval_device = "cpu" if a.device == "cpu" else device_name(torch, a.device)
    if a.device != "cpu":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        model.to(a.device)
    final = {
        "test": fr.metrics(predict(fin_test), labels[fin_test]),
        "calibration": fr.metrics(predict(fin_cal), labels[fin_cal]),
    }
    model.to("cpu")
    eval_seconds = time.time() - t_eval
    os.makedirs(a.out, exist_ok=True)
    onnx_path = os.path.join(a.out, a.onnx_name)
    export_model = copy.deepcopy(model).to(memory_format=torch.contiguous_format)
    sha = fr.export_onnx(
        torch, export_model, onnx_path, classes=data["classes"], mean=task["mean"],
        std=task["std"], doc=task["description"], dummy=task["dummy"](torch),
        base_meta=task.get("base_meta"),
        extra_meta={
            "fedcalib.model.name": task["name"],
            "fedcalib.model.recipe": f"models/{task['name']}/train.py",
            "fedcalib.train.partition": psum["source"],
            "fedcalib.train.seed": str(a.seed),
            "fedcalib.train.rounds": str(rounds_run),
        })
    cfg = dict(config)
    cfg.update({"rounds": a.rounds, "threads": a.threads, "eval_every": a.eval_every,
                "eval_max_rows": a.eval_max_rows})
    curve = [{k: h[k] for k in ("round", "test_accuracy", "test_cwece")}
             for h in history if "test_accuracy" in h]
    results = {
        "name": task["name"],
        "dataset": task["name"].split("-")[1],
        "specs": data["specs"],
        "parameters": nparams,
        "config": cfg,
        "partition": psum,
        "final": final,
        "final_rows": {"test": int(len(fin_test)), "calibration": int(len(fin_cal)),
                       "test_all": int(len(test_rows)), "calibration_all": int(len(cal_rows))},
        "rounds_run": rounds_run,
        "rounds_planned": a.rounds,
        "stopped": stopped,
        "accuracy_curve": curve,
        "history": history,
        "onnx": {"file": a.onnx_name, "bytes": os.path.getsize(onnx_path), "sha256": sha},
        "train_seconds": round(train_seconds, 1),
        "final_eval_seconds": round(eval_seconds, 1),
        "checkpoint": ckpt_path,
        "environment": {"torch": torch.__version__, "numpy": np.__version__,
                        "python": platform.python_version(), "machine": platform.machine(),
                        "threads": a.threads, "train_device": train_device,
                        "eval_device": eval_device,
                        "train_torch": ck.get("torch", torch.__version__) if ck else torch.__version__},
    }
    fr.write_results(a.out, results)
    t, c = final["test"], final["calibration"]
    print(f"exported round {rounds_run} ({stopped}; {train_seconds:.0f}s of training): test acc "
          f"{t['accuracy']:.4f} cwECE {t['cwece']:.4f} ECE {t['ece']:.4f} NLL {t['nll']:.4f} "
          f"(n={t['n']}); calibration acc {c['accuracy']:.4f} cwECE {c['cwece']:.4f}; "
          f"{onnx_path} ({os.path.getsize(onnx_path)} bytes) sha256 {sha}", flush=True)
