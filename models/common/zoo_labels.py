#!/usr/bin/python3
"""Writes the labels of a data set, in the recipes' row order (zoo_data), as
a fedcalib logits file with all-zero logits, for `fedcalib partition
--data-or-logits` (its dataset specs read one split, while the recipes use
two: CIFAR-10 train then test, FEMNIST's LEAF train files then test files).
Only labels (and for FEMNIST the client and split columns: LEAF user,
0 = LEAF train, 2 = LEAF test) matter to the partition.

  /usr/bin/python3 models/common/zoo_labels.py cifar10 /tmp/cifar10-labels.npz
  /usr/bin/python3 models/common/zoo_labels.py femnist /tmp/femnist-labels.npz
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fedrecipe as fr  # noqa: E402
import zoo_data  # noqa: E402


def main(dataset, out):
    cols = {}
    if dataset == "cifar10":
        _, labels, classes, specs = zoo_data.load_cifar10()
        c = len(classes)
    elif dataset == "femnist":
        _, labels, client, split, _, specs = zoo_data.load_femnist()
        cols = {"client": client.astype(np.int32), "split": split.astype(np.uint8)}
        c = 62
    else:
        sys.exit(f"zoo_labels.py: unknown data set {dataset!r}: want cifar10 or femnist")
    tmp = out + ".tmp.npz"
    np.savez(tmp, logits=np.zeros((len(labels), c), dtype=np.float32),
             labels=labels.astype(np.int64), **cols)
    os.replace(tmp, out)
    print(f"wrote {out}: {len(labels)} labels, {c} classes, rows = {' then '.join(specs)}, "
          f"labels_sha256 {fr.labels_sha256(labels)}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: zoo_labels.py cifar10|femnist OUT.npz")
    main(*sys.argv[1:])
