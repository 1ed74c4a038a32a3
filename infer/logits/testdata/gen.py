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

# The dtype matrix: float32/float64 logits × little/big-endian × C/Fortran
# order × numpy.savez (stored) / numpy.savez_compressed (deflated), all
# holding the same values. The integer columns cycle through every integer
# dtype so that each appears in both byte orders.
logits = np.array(
    [[1.5, -2.0, 0.25, 4.0], [0.0, 3.0, -1.0, 0.5], [-8.0, 16.0, 0.125, 2.0]]
)
labels, client, split = [2, 1, 3], [7, 3, 0], [1, 2, 0]
ints = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]
i = 0
for ftype in ["f4", "f8"]:
    for order in ["<", ">"]:
        for layout in ["c", "f"]:
            for save in [np.savez, np.savez_compressed]:
                def dt(t):
                    return ("|" if t[1] == "1" else order) + t

                ltype = ints[(i + 4 * (i // 8)) % 8]
                a = logits.astype(dt(ftype))
                if layout == "f":
                    a = np.asfortranarray(a)
                arrays = {"logits": a, "labels": np.array(labels, dtype=dt(ltype))}
                if i % 2 == 0:
                    arrays["client"] = np.array(client, dtype=dt(ints[(i + 3) % 8]))
                    arrays["split"] = np.array(split, dtype=dt(ints[(i + 5) % 8]))
                kind = "savez" if save is np.savez else "compressed"
                name = "matrix_%s_%s_%s_%s.npz" % (
                    ftype, "le" if order == "<" else "be", layout, kind)
                save(name, **arrays)
                i += 1

# Class names (the optional "classes" array) as NumPy makes them from a
# list of str (<U, stored), big-endian UCS-4 (>U, deflated) and bytes (|S).
names_logits = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -3.0]], dtype=np.float32)
names_labels = np.array([2, 0], dtype=np.int64)
np.savez("numpy_classes_u.npz", logits=names_logits, labels=names_labels,
         classes=np.array(["cat", "dög", "\U0001F426 bird"]))
np.savez_compressed("numpy_classes_be.npz", logits=names_logits, labels=names_labels,
                    classes=np.array(["cat", "dög", "\U0001F426 bird"], dtype=">U6"))
np.savez("numpy_classes_s.npz", logits=names_logits, labels=names_labels,
         classes=np.array([b"cat", b"dog", b"bird"]))
