# Writes the NumPy-made fixtures read by npy_numpy_test.go. Run from this
# directory with a Python that has NumPy: /usr/bin/python3 gen.py
#
# matrix_savez.npz (numpy.savez, stored) and matrix_compressed.npz
# (numpy.savez_compressed, deflated) hold the same arrays:
#   x2_<dtype>_<le|be>_<c|f>  shape (3, 4), values arange(12)
#   x3_<dtype>_<le|be>_<c|f>  shape (3, 2, 4), values arange(24)
#   y_<dtype>_<le|be>         shape (3,), values [2, 0, 1]
# for every dtype the reader accepts, both byte orders (one-byte dtypes
# have none: "le" only) and C or Fortran order; bool arrays hold
# values % 2. x.npy and y.npy are a big-endian Fortran-ordered float32 X
# and big-endian int16 labels for the npy: input.
import numpy as np

DTYPES = ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"]


def typed(values, t, order):
    if t == "b1":
        return (values % 2).astype("|b1")
    return values.astype(("|" if t[1] == "1" else order) + t)


arrays = {}
for t in DTYPES:
    for order in ["<", ">"]:
        if t[1] == "1" and order == ">":
            continue
        o = "le" if order == "<" else "be"
        arrays["y_%s_%s" % (t, o)] = typed(np.array([2, 0, 1]), t, order)
        for layout in ["c", "f"]:
            for name, shape in [("x2", (3, 4)), ("x3", (3, 2, 4))]:
                a = typed(np.arange(np.prod(shape)).reshape(shape), t, order)
                if layout == "f":
                    a = np.asfortranarray(a)
                arrays["%s_%s_%s_%s" % (name, t, o, layout)] = a
np.savez("matrix_savez.npz", **arrays)
np.savez_compressed("matrix_compressed.npz", **arrays)
np.save("x.npy", np.asfortranarray(np.arange(12).reshape(3, 4).astype(">f4")))
np.save("y.npy", np.array([2, 0, 1], dtype=">i2"))
