#!/usr/bin/python3
"""Writes the labels of a 70,000-row MNIST-family data set (train file then
test file, the row order the recipes use) as a fedcalib logits file with
all-zero logits, so that `fedcalib partition --data-or-logits` can partition
the merged data set (its dataset specs read the train or the test file, not
both). Only the labels matter to the partition; the logits are placeholders.

  /usr/bin/python3 models/common/labels_npz.py mnist /tmp/mnist-labels.npz
  /usr/bin/python3 models/common/labels_npz.py fashion /tmp/fashion-labels.npz
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fedrecipe as fr  # noqa: E402


def main(dataset, out, data_dir=None):
    if data_dir is None:
        data_dir = fr.gomnist_dir(os.path.dirname(os.path.dirname(HERE))) if dataset == "mnist" else fr.FASHION_DIR
    _, labels = fr.load_idx_pair(data_dir)
    classes = int(labels.max()) + 1
    tmp = out + ".tmp.npz"
    np.savez(tmp, logits=np.zeros((len(labels), classes), dtype=np.float32), labels=labels.astype(np.int64))
    os.replace(tmp, out)
    print(f"wrote {out}: {len(labels)} labels, {classes} classes, labels_sha256 {fr.labels_sha256(labels)}")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("mnist", "fashion"):
        sys.exit("usage: labels_npz.py mnist|fashion OUT.npz [DATA_DIR]")
    main(*sys.argv[1:])
