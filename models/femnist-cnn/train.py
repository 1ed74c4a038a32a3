#!/usr/bin/python3
"""femnist-cnn: the LEAF baseline CNN for FEMNIST (Caldas et al. 2018,
models/femnist/cnn.py): conv 5x5x32 same + ReLU + maxpool 2, conv 5x5x64
same + ReLU + maxpool 2, dense 2048 + ReLU, dense 62 (6.6 M parameters,
~26 MB of ONNX, not committed). FedAvg on LEAF's natural per-writer
partition of the FEMNIST subset in femnist-leaf.tar.gz (rows: the LEAF train
files then the test files), LEAF "sample" split with half of each writer's
test rows as calibration, writers with fewer than 100 samples dropped.
The paper uses a ResNet18 on the full FEMNIST (App. A.1); see CARD.md.

Run from the repository root:  nice -n 10 /usr/bin/python3 models/femnist-cnn/train.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "common"))
import zoo_data  # noqa: E402
import zoo_recipe  # noqa: E402


def build(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 2048), nn.ReLU(), nn.Linear(2048, 62))


TASK = {
    "name": "femnist-cnn",
    "description": "fedcalib femnist-cnn: LEAF CNN (conv32-conv64-fc2048), FedAvg on the LEAF "
                   "FEMNIST subset, natural per-writer partition, LEAF sample split; input = "
                   "LEAF's 28x28 float pixels standardised (NCHW), output = 62 logits",
    "load": zoo_data.femnist_task_data,
    "transform": zoo_data.femnist_transform,
    "build": build,
    "dummy": lambda torch: torch.zeros(1, 1, 28, 28),
    "base_meta": zoo_data.FEMNIST_META,
    "partition": os.path.join(HERE, "..", "partitions", "femnist-leaf-sample.json.gz"),
    "defaults": {
        "rounds": 40,
        "sample_rate": 0.2,
        "local_epochs": 1,
        "batch_size": 10,
        "client_lr": 0.01,
        "momentum": 0.9,
        "server_lr": 1.0,
        "seed": 1,
        "threads": 1,
        "eval_every": 5,
    },
    "out": HERE,
}

if __name__ == "__main__":
    zoo_recipe.main(sys.argv[1:], TASK)
