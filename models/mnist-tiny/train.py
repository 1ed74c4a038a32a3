#!/usr/bin/python3
"""mnist-tiny: a ~27k-parameter CNN on MNIST, trained by FedAvg on the
Dirichlet(beta=0.1) 100-client partition. Small enough (about 110 KB of ONNX)
to be committed and used by tests and `make demo`.

Run from the repository root:  nice -n 10 /usr/bin/python3 models/mnist-tiny/train.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "common"))
import mnist_recipe  # noqa: E402


def build(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 32), nn.ReLU(), nn.Linear(32, 10))


DEFAULTS = {
    "name": "mnist-tiny",
    "dataset": "mnist",
    "description": "fedcalib mnist-tiny: 2-conv CNN (8,16 channels, 32 hidden), FedAvg on "
                   "MNIST Dirichlet beta=0.1 K=100; input = normalised 28x28 image, output = logits",
    "classes": [str(i) for i in range(10)],
    "mean": 0.1307,
    "std": 0.3081,
    "partition": os.path.normpath(os.path.join(HERE, "..", "partitions", "mnist-dir0.1-k100.json.gz")),
    "rounds": 100,
    "sample_rate": 0.1,
    "local_epochs": 1,
    "batch_size": 64,
    "client_lr": 0.05,
    "server_lr": 1.0,
    "seed": 1,
    "out": HERE,
}

if __name__ == "__main__":
    mnist_recipe.main(sys.argv[1:], DEFAULTS, build)
