#!/usr/bin/python3
"""bench/resnet18_peer.py — PyTorch's side of bench/resnet18.sh: the same
ResNet18 weights (the recipe's checkpoint), eval mode, torch.inference_mode,
over the same images preprocessed beforehand into the batches the Go bare
loop runs (records/s of the forward passes alone, like the bare ONNX Runtime
loop), THREADS intra-op threads. Prints one JSON line per repetition.

  bench/resnet18_peer.py NAME IMAGES.npz BATCH THREADS REPS
"""
import json
import os
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "models", "common"))


def main():
    name, images, batch, threads, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    import torch
    import importlib.util

    torch.set_num_threads(threads)
    spec = importlib.util.spec_from_file_location("recipe", os.path.join(REPO, "models", name, "train.py"))
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    task = recipe.TASK
    model = task["build"](torch)
    ck = torch.load(os.path.expanduser(f"~/.cache/fedcalib/train/{name}/ckpt.pt"), map_location="cpu",
                    weights_only=False)
    model.load_state_dict(ck["state_dict"])
    model.eval()
    x = np.load(images)["x"]  # uint8 [N, H, W, C] as fedcalib's npz input reads it
    xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy())
    batches = [task["transform"](torch, xt[i:i + batch]).contiguous() for i in range(0, len(xt), batch)]
    with torch.inference_mode():
        model(batches[0])  # warm-up
        for r in range(reps):
            t0 = time.perf_counter()
            for b in batches:
                model(b)
            dt = time.perf_counter() - t0
            print(json.dumps({"rep": r, "records": len(xt), "seconds": dt, "records_per_s": len(xt) / dt,
                              "torch": torch.__version__, "threads": threads}), flush=True)


if __name__ == "__main__":
    main()
