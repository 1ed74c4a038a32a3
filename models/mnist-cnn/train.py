#!/usr/bin/python3
"""mnist-cnn: the paper's "Simple CNN" on MNIST — the LEAF baseline CNN
(Caldas et al. 2018, models/femnist/cnn.py): conv 5x5x32 same + ReLU +
maxpool 2, conv 5x5x64 same + ReLU + maxpool 2, dense 2048 + ReLU, dense 10
(6.5 M parameters, ~26 MB of ONNX, not committed). Trained by FedAvg on the
Dirichlet(beta=0.1) 100-client partition as in App. A.3.1.

Run from the repository root:  nice -n 10 /usr/bin/python3 models/mnist-cnn/train.py
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
    "name": "mnist-cnn",
    "dataset": "mnist",
    "description": "fedcalib mnist-cnn: LEAF CNN (conv32-conv64-fc2048), FedAvg on MNIST "
                   "Dirichlet beta=0.1 K=100; input = normalised 28x28 image, output = logits",
    "classes": [str(i) for i in range(10)],
    "mean": 0.1307,
    "std": 0.3081,
    "partition": os.path.normpath(os.path.join(HERE, "..", "partitions", "mnist-dir0.1-k100.json.gz")),
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
