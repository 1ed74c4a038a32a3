#!/usr/bin/python3
"""resnet18-femnist: the paper's FEMNIST model (App. A.1: a ResNet18) in the
zoo's CIFAR form (3x3 stride-1 stem convolution on the 28x28 grey image, no
max-pool, BasicBlock stages [2, 2, 2, 2] of 64-128-256-512 channels with
BatchNorm, global average pool, linear head to LEAF's 62 classes): 11.2 M
parameters, ~45 MB of ONNX, not committed. Trained by FedAvg on LEAF's
natural per-writer partition of the FEMNIST subset in femnist-leaf.tar.gz,
the same data, partition and FedAvg settings as femnist-cnn (q = 0.2,
client lr 0.01 with momentum 0.9, B = 10, one local epoch); only the network
differs. See CARD.md for what differs from the paper (the full FEMNIST,
60 clients a round).

Resumable (checkpoint under ~/.cache/fedcalib/train/resnet18-femnist/); see
../common/resnet_recipe.py. Run from the repository root:

  nice -n 19 /usr/bin/python3 models/resnet18-femnist/train.py
  /usr/bin/python3 models/resnet18-femnist/train.py --device cuda --checkpoint-every 10
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "common"))
import resnet_recipe  # noqa: E402
import zoo_data  # noqa: E402

TASK = {
    "name": "resnet18-femnist",
    "description": "fedcalib resnet18-femnist: ResNet18 (CIFAR stem: 3x3 conv, no max-pool; "
                   "BasicBlock [2,2,2,2], BatchNorm), FedAvg on the LEAF FEMNIST subset, natural "
                   "per-writer partition, LEAF sample split; input = LEAF's 28x28 float pixels "
                   "standardised (NCHW), output = 62 logits",
    "load": zoo_data.femnist_task_data,
    "transform": zoo_data.femnist_transform,
    "build": lambda torch: resnet_recipe.resnet18_cifar(torch, 1, 62),
    "dummy": lambda torch: torch.zeros(1, 1, 28, 28),
    "mean": zoo_data.FEMNIST_MEAN,
    "std": zoo_data.FEMNIST_STD,
    "base_meta": zoo_data.FEMNIST_META,
    "partition": os.path.normpath(os.path.join(HERE, "..", "partitions", "femnist-leaf-sample.json.gz")),
    "defaults": {
        "rounds": 1000,
        "sample_rate": 0.2,
        "local_epochs": 1,
        "batch_size": 10,
        "client_lr": 0.01,
        "momentum": 0.9,
        "server_lr": 1.0,
        "seed": 1,
        "threads": 1,
        "eval_every": 10,
        "eval_max_rows": None,
    },
    "out": HERE,
}

if __name__ == "__main__":
    resnet_recipe.main(sys.argv[1:], TASK)
