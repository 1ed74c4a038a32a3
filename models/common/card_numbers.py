#!/usr/bin/python3
"""Prints the numbers section of a model card from the model's results.json,
so the card quotes the run instead of hand-copied figures.

  /usr/bin/python3 models/common/card_numbers.py models/mnist-cnn
"""
import json
import os
import sys


def pct(v, digits=2):
    return f"{100 * v:.{digits}f}%"


def main(folder):
    r = json.load(open(os.path.join(folder, "results.json")))
    c, p = r["config"], r["partition"]
    print("| split (union over clients) | rows | accuracy | cwECE (15 bins) | top-label ECE | NLL | Brier |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in ("test", "calibration"):
        m = r["final"][name]
        print(f"| {name} | {m['n']} | {pct(m['accuracy'])} | {pct(m['cwece'], 3)} | {pct(m['ece'], 3)} "
              f"| {m['nll']:.4f} | {m['brier']:.4f} |")
    print()
    print(f"- ONNX: `{r['onnx']['file']}`, {r['onnx']['bytes']} bytes, sha256 `{r['onnx']['sha256']}`")
    print(f"- parameters: {r['parameters']}")
    print(f"- FedAvg: {c['rounds']} rounds, Poisson sampling q = {c['sample_rate']}, "
          f"{c['local_epochs']} local epoch per round, batch {c['batch_size']}, client SGD lr {c['client_lr']}"
          f" (momentum {c['momentum']}), server lr {c['server_lr']}, seed {c['seed']}")
    parts = [h["participants"] for h in r["history"]]
    print(f"- participants per round: mean {sum(parts) / len(parts):.1f}, min {min(parts)}, max {max(parts)}")
    print(f"- partition: {p['source']}: {p['clients']} clients, {p['rows_train']} train / "
          f"{p['rows_calibration']} calibration / {p['rows_test']} test rows; train rows per client "
          f"min/median/max {p['train_rows_per_client_min_median_max']}")
    e = r["environment"]
    where = e.get("train_device", "cpu")
    where = "a shared 2-core VM" if where == "cpu" else where
    threads = f"{e['threads']} torch thread" + ("s" if e["threads"] != 1 else "")
    print(f"- training time: {r['train_seconds']:.0f} s wall on {where} "
          f"({threads}, torch {e.get('train_torch', e['torch'])}, numpy {e['numpy']}, Python {e['python']})")
    print()
    print("Test accuracy / cwECE during training:")
    print()
    print("| round | " + " | ".join(str(h["round"]) for h in r["history"] if "test_accuracy" in h) + " |")
    print("|---|" + "---:|" * sum(1 for h in r["history"] if "test_accuracy" in h))
    print("| accuracy | " + " | ".join(pct(h["test_accuracy"]) for h in r["history"] if "test_accuracy" in h) + " |")
    print("| cwECE | " + " | ".join(pct(h["test_cwece"]) for h in r["history"] if "test_cwece" in h) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
