# Writes the NumPy-made fixtures read by logits_test.go. Run with a Python
# that has NumPy: /usr/bin/python3 gen.py
import numpy as np

np.savez(
    "numpy_small.npz",
    logits=np.array([[1.5, -2.0, 0.25], [0.0, 3.0, -1.0]], dtype=np.float32),
    labels=np.array([2, 1], dtype=np.int64),
    client=np.array([7, 3], dtype=np.int32),
    split=np.array([1, 2], dtype=np.uint8),
)
# float64 logits and int32 labels, compressed, no optional columns.
np.savez_compressed(
    "numpy_f8_i4.npz",
    logits=np.array([[0.5, 0.25], [-1.0, 2.0], [4.0, 8.0]], dtype=np.float64),
    labels=np.array([0, 1, 1], dtype=np.int32),
)
