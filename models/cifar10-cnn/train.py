#!/usr/bin/python3
"""cifar10-cnn: the paper's "Simple CNN" on CIFAR-10 — the LEAF baseline CNN
(Caldas et al. 2018, models/femnist/cnn.py) on 32x32 RGB: conv 5x5x32 same +
ReLU + maxpool 2, conv 5x5x64 same + ReLU + maxpool 2, dense 2048 + ReLU,
dense 10 (8.4 M parameters, ~34 MB of ONNX, not committed). Trained by FedAvg
on the Dirichlet(beta=0.1) 100-client partition of all 60,000 images
(imagefolder:cifar10-jpeg.tar.gz:train then :test) as in App. A.3.1, with
fewer rounds (see CARD.md).

Run from the repository root:  nice -n 10 /usr/bin/python3 models/cifar10-cnn/train.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "common"))
import zoo_data  # noqa: E402
import zoo_recipe  # noqa: E402

MEAN = zoo_data.CIFAR10_MEAN
STD = zoo_data.CIFAR10_STD


def build(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 2048), nn.ReLU(), nn.Linear(2048, 10))


def load():
    images, labels, classes, specs = zoo_data.load_cifar10()
    return {"x": images.transpose(0, 3, 1, 2).copy(), "labels": labels,  # HWC -> CHW
            "classes": classes, "specs": specs}



TASK = {
    "name": "cifar10-cnn",
    "description": "fedcalib cifar10-cnn: LEAF CNN (conv32-conv64-fc2048), FedAvg on CIFAR-10 "
                   "Dirichlet beta=0.1 K=100; input = normalised 32x32 RGB image (NCHW), "
                   "output = logits",
    "load": load,
    "transform": zoo_data.cifar10_transform,
    "build": build,
    "dummy": lambda torch: torch.zeros(1, 3, 32, 32),
    "base_meta": None,  # fedrecipe's default: scale 1/255, mean/std per channel, NCHW, float32
    "mean": MEAN,
    "std": STD,
    "partition": os.path.join(HERE, "..", "partitions", "cifar10-dir0.1-k100.json.gz"),
    "defaults": {
        "rounds": 100,
        "sample_rate": 0.1,
        "local_epochs": 1,
        "batch_size": 64,
        "client_lr": 0.01,
        "momentum": 0.9,
        "server_lr": 1.0,
        "seed": 1,
        "threads": 1,
        "eval_every": 10,
    },
    "out": HERE,
}

if __name__ == "__main__":
    zoo_recipe.main(sys.argv[1:], TASK)
