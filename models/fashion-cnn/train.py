#!/usr/bin/python3
"""fashion-cnn: the paper's "Simple CNN" (the LEAF baseline CNN, as in
models/mnist-cnn) on Fashion-MNIST, trained by FedAvg on the Dirichlet
(beta=0.1) 100-client partition of all 70,000 images with the MNIST recipe.
Fashion-MNIST is not in the paper; this model extends its MNIST setting.
Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).

Run from the repository root:  nice -n 10 /usr/bin/python3 models/fashion-cnn/train.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "common"))
import mnist_recipe  # noqa: E402


def build(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 2048), nn.ReLU(), nn.Linear(2048, 10))


DEFAULTS = {
    "name": "fashion-cnn",
    "dataset": "fashion",
    "description": "fedcalib fashion-cnn: LEAF CNN (conv32-conv64-fc2048), FedAvg on "
                   "Fashion-MNIST Dirichlet beta=0.1 K=100; input = normalised 28x28 image, "
                   "output = logits",
    # The class names fedcalib's fashion: dataset reader uses.
    "classes": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"],
    "mean": 0.2860,
    "std": 0.3530,
    "partition": os.path.normpath(os.path.join(HERE, "..", "partitions", "fashion-dir0.1-k100.json.gz")),
    "rounds": 100,
    "sample_rate": 0.1,
    "local_epochs": 1,
    "batch_size": 64,
    "client_lr": 0.01,
    "server_lr": 1.0,
    "seed": 1,
    "out": HERE,
}

if __name__ == "__main__":
    mnist_recipe.main(sys.argv[1:], DEFAULTS, build)
