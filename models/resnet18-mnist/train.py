#!/usr/bin/python3
"""resnet18-mnist: the paper's ResNet18 (App. A.1) on MNIST, in the usual
CIFAR form (3x3 stride-1 stem convolution, no max-pool, BasicBlock stages
[2, 2, 2, 2] of 64-128-256-512 channels with BatchNorm, global average pool,
linear head) on 1-channel 28x28 input: 11.17 M parameters, ~45 MB of ONNX,
not committed. Trained by FedAvg on the Dirichlet(beta=0.1) 100-client
partition of all 70,000 images (mnist:DIR:all), the same partition and
FedAvg settings as mnist-cnn.

Resumable (checkpoint after every round under ~/.cache/fedcalib/train/
resnet18-mnist/); see ../common/resnet_recipe.py and CARD.md. Run from the
repository root:

  nice -n 19 /usr/bin/python3 models/resnet18-mnist/train.py --deadline-minutes 130
  /usr/bin/python3 models/resnet18-mnist/train.py --export-only   # model.onnx + results.json now
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "common"))
import fedrecipe as fr  # noqa: E402
import resnet_recipe  # noqa: E402

MEAN, STD = 0.1307, 0.3081


def load():
    data_dir = os.environ.get("MNIST_DIR") or fr.gomnist_dir(REPO)
    images, labels = fr.load_idx_pair(data_dir)  # train file then t10k file
    return {"x": images[:, None, :, :].copy(), "labels": labels,
            "classes": [str(i) for i in range(10)],
            "specs": [f"mnist:{os.path.abspath(data_dir)}:all"]}


def transform(torch, xb):
    """uint8 [B,1,28,28] -> (pixel/255 - mean)/std, the preprocessing the
    ONNX metadata records."""
    return (xb.to(torch.float32) * (1.0 / 255.0) - MEAN) / STD


TASK = {
    "name": "resnet18-mnist",
    "description": "fedcalib resnet18-mnist: ResNet18 (CIFAR stem: 3x3 conv, no max-pool; "
                   "BasicBlock [2,2,2,2], BatchNorm), FedAvg on MNIST Dirichlet beta=0.1 K=100; "
                   "input = normalised 28x28 image, output = logits",
    "load": load,
    "transform": transform,
    "build": lambda torch: resnet_recipe.resnet18_cifar(torch, 1, 10),
    "dummy": lambda torch: torch.zeros(1, 1, 28, 28),
    "mean": MEAN,
    "std": STD,
    "partition": os.path.normpath(os.path.join(HERE, "..", "partitions", "mnist-dir0.1-k100.json.gz")),
    "defaults": {
        "rounds": 100,
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
