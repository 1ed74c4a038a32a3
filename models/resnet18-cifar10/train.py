#!/usr/bin/python3
"""resnet18-cifar10: the paper's ResNet18 (App. A.1, A.3.1) on CIFAR-10, in
the usual CIFAR form (3x3 stride-1 stem convolution, no max-pool, BasicBlock
stages [2, 2, 2, 2] of 64-128-256-512 channels with BatchNorm, global
average pool, linear head): 11.17 M parameters, ~45 MB of ONNX, not
committed. Trained by FedAvg on the Dirichlet(beta=0.1) 100-client partition
of all 60,000 images (imagefolder:cifar10-jpeg.tar.gz:train then :test),
the same data and partition as cifar10-cnn, with the paper's settings
(q = 0.1, client lr 0.01, server lr 1, B = 64, one local epoch). The paper
trains its CIFAR ResNet18 for E = 100 global epochs; with a tenth of the
clients a round, a global epoch is about ten rounds, so the schedule is
1,000 rounds, and the card says how many of them were run.

Resumable (checkpoint after every round under ~/.cache/fedcalib/train/
resnet18-cifar10/); see ../common/resnet_recipe.py. Run from the repository
root:

  FEDCALIB_DATA=../shared/data nice -n 19 /usr/bin/python3 models/resnet18-cifar10/train.py
  /usr/bin/python3 models/resnet18-cifar10/train.py --export-only
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "common"))
import resnet_recipe  # noqa: E402
import zoo_data  # noqa: E402

MEAN = zoo_data.CIFAR10_MEAN
STD = zoo_data.CIFAR10_STD


def load():
    images, labels, classes, specs = zoo_data.load_cifar10()
    return {"x": images.transpose(0, 3, 1, 2).copy(), "labels": labels,  # HWC -> CHW
            "classes": classes, "specs": specs}



TASK = {
    "name": "resnet18-cifar10",
    "description": "fedcalib resnet18-cifar10: ResNet18 (CIFAR stem: 3x3 conv, no max-pool; "
                   "BasicBlock [2,2,2,2], BatchNorm), FedAvg on CIFAR-10 Dirichlet beta=0.1 K=100; "
                   "input = normalised 32x32 RGB image (NCHW), output = logits",
    "load": load,
    "transform": zoo_data.cifar10_transform,
    "build": lambda torch: resnet_recipe.resnet18_cifar(torch, 3, 10),
    "dummy": lambda torch: torch.zeros(1, 3, 32, 32),
    "mean": MEAN,
    "std": STD,
    "partition": os.path.normpath(os.path.join(HERE, "..", "partitions", "cifar10-dir0.1-k100.json.gz")),
    "defaults": {
        "rounds": 1000,
        "sample_rate": 0.1,
        "local_epochs": 1,
        "batch_size": 64,
        "client_lr": 0.01,
        "momentum": 0.0,
        "server_lr": 1.0,
        "seed": 1,
        "threads": 1,
        "eval_every": 5,
        "eval_max_rows": 2000,
    },
    "out": HERE,
}

if __name__ == "__main__":
    resnet_recipe.main(sys.argv[1:], TASK)
