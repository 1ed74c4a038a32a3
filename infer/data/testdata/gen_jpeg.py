"""Generates testdata/jpeg: small JPEGs of odd sizes and the RGB pixels
PIL (libjpeg-turbo, default decompression) decodes them to.

Run with the PIL the comparison targets, on Debian 12 with
libjpeg-turbo-progs (cjpeg) and libturbojpeg0 installed:

    /usr/bin/python3 infer/data/testdata/gen_jpeg.py

For each NAME it writes NAME.jpg and NAME.rgb, the H×W×3 bytes of
Image.open("NAME.jpg").convert("RGB"), or NAME.err, PIL's error, when
PIL refuses the file. The images are smooth colour gradients plus seeded
noise, so that the chroma planes vary and the upsampler's edge handling
shows. CASES are written by PIL; CJPEG_CASES by libjpeg-turbo's cjpeg
(sampling factors, restart markers and arithmetic coding PIL cannot
write); ycck by TurboJPEG, which codes CMYK pixels as YCCK; the BROKEN
cases are damaged copies of 420_17x9.jpg. The output is deterministic for
a given PIL and libjpeg-turbo build.
"""

import ctypes
import io
import os
import subprocess

import numpy as np
from PIL import Image

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jpeg")

# name, width, height, mode, subsampling (0 4:4:4, 1 4:2:2, 2 4:2:0), quality, progressive
CASES = [
    ("420_5x3", 5, 3, "RGB", 2, 90, False),
    ("420_17x9", 17, 9, "RGB", 2, 75, False),
    ("420_3x3", 3, 3, "RGB", 2, 90, False),  # chroma 2 wide: libjpeg replicates
    ("420_16x16_progressive", 16, 16, "RGB", 2, 85, True),
    ("422_17x9", 17, 9, "RGB", 1, 75, False),
    ("422_5x3", 5, 3, "RGB", 1, 90, False),
    ("444_17x9", 17, 9, "RGB", 0, 75, False),
    ("gray_17x9", 17, 9, "L", 0, 75, False),
    ("gray_5x3", 5, 3, "L", 0, 90, False),
]


def image(w, h, mode, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 255 * xx / max(w - 1, 1)
    g = 255 * yy / max(h - 1, 1)
    b = 128 + 100 * np.sin(xx + 2 * yy)
    px = np.stack([r, g, b], axis=-1) + rng.normal(0, 40, (h, w, 3))
    px = np.clip(np.round(px), 0, 255).astype(np.uint8)
    im = Image.fromarray(px, "RGB")
    return im.convert("L") if mode == "L" else im


# name, width, height, cjpeg options (the image is RGB unless -grayscale)
CJPEG_CASES = [
    ("411_33x17", 33, 17, ["-sample", "4x1", "-quality", "80"]),
    ("440_17x9", 17, 9, ["-sample", "1x2", "-quality", "80"]),
    ("410_33x17", 33, 17, ["-sample", "4x2", "-quality", "80"]),
    ("420_restart_40x24", 40, 24, ["-sample", "2x2", "-restart", "1B"]),
    ("444_progressive_restart_24x16", 24, 16, ["-sample", "1x1", "-progressive", "-restart", "1"]),
    ("420_arithmetic_17x9", 17, 9, ["-arithmetic"]),
    ("gray_restart_33x17", 33, 17, ["-grayscale", "-restart", "2B"]),
]


def broken(src):
    """Damaged copies of the JPEG src, by name."""
    eoi = src.rfind(b"\xff\xd9")
    corrupt = bytearray(src)
    sos = src.find(b"\xff\xda")
    for i in range(sos + 30, sos + 60):  # entropy-coded data, no 0xFF made or broken
        if corrupt[i] != 0xFF and corrupt[i - 1] != 0xFF:
            corrupt[i] = (corrupt[i] * 7 + 3) & 0xFE
    return {
        "broken_truncated": src[: len(src) * 6 // 10],  # in a Huffman table
        "broken_truncated_scan": src[: len(src) * 9 // 10],  # in the entropy-coded data
        "broken_no_eoi": src[:eoi],
        "broken_extraneous": src[:eoi] + b"\x00\x12\x34" + src[eoi:],
        "broken_trailing": src + b"trailing bytes",
        "broken_corrupt": bytes(corrupt),
    }


def ycck(w, h, seed):
    """A 4:2:0 YCCK JPEG of a CMYK image, made by TurboJPEG (tjCompress2
    codes TJPF_CMYK pixels as YCCK)."""
    tj = ctypes.CDLL("libturbojpeg.so.0")
    tj.tjInitCompress.restype = ctypes.c_void_p
    tj.tjCompress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.POINTER(ctypes.POINTER(ctypes.c_ubyte)), ctypes.POINTER(ctypes.c_ulong),
                               ctypes.c_int, ctypes.c_int, ctypes.c_int]
    tj.tjFree.argtypes = [ctypes.c_void_p]
    tj.tjDestroy.argtypes = [ctypes.c_void_p]
    cmyk = np.asarray(image(w, h, "RGB", seed).convert("CMYK"), dtype=np.uint8)
    handle = tj.tjInitCompress()
    buf, size = ctypes.POINTER(ctypes.c_ubyte)(), ctypes.c_ulong(0)
    TJPF_CMYK, TJSAMP_420 = 11, 2
    if tj.tjCompress2(handle, cmyk.tobytes(), w, 0, h, TJPF_CMYK, ctypes.byref(buf), ctypes.byref(size), TJSAMP_420, 85, 0):
        raise RuntimeError("tjCompress2 failed")
    out = ctypes.string_at(buf, size.value)
    tj.tjFree(buf)
    tj.tjDestroy(handle)
    adobe = out.find(b"Adobe")
    assert adobe > 0 and out[adobe + 11] == 2, "not a YCCK JPEG"  # APP14 transform 2
    return out


def write(name, jpeg):
    with open(os.path.join(HERE, name + ".jpg"), "wb") as f:
        f.write(jpeg)
    for ext in (".rgb", ".err"):
        if os.path.exists(os.path.join(HERE, name + ext)):
            os.remove(os.path.join(HERE, name + ext))
    try:
        rgb = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"), dtype=np.uint8)
    except OSError as e:
        with open(os.path.join(HERE, name + ".err"), "w") as f:
            f.write(str(e) + "\n")
        return
    with open(os.path.join(HERE, name + ".rgb"), "wb") as f:
        f.write(rgb.tobytes())


def main():
    os.makedirs(HERE, exist_ok=True)
    for seed, (name, w, h, mode, sub, q, prog) in enumerate(CASES):
        path = os.path.join(HERE, name + ".jpg")
        image(w, h, mode, seed).save(path, "JPEG", quality=q, subsampling=sub, progressive=prog)
        rgb = np.asarray(Image.open(path).convert("RGB"), dtype=np.uint8)
        assert rgb.shape == (h, w, 3)
        with open(os.path.join(HERE, name + ".rgb"), "wb") as f:
            f.write(rgb.tobytes())
    seed = len(CASES)
    for name, w, h, opts in CJPEG_CASES:
        im = image(w, h, "RGB", seed)
        seed += 1
        ppm = io.BytesIO()
        im.save(ppm, "PPM")
        write(name, subprocess.run(["cjpeg"] + opts, input=ppm.getvalue(), capture_output=True, check=True).stdout)
    im = image(17, 9, "RGB", seed)
    im.convert("CMYK").save(os.path.join(HERE, "cmyk_17x9.jpg"), "JPEG", quality=85)  # Adobe CMYK, inverted
    write("cmyk_17x9", open(os.path.join(HERE, "cmyk_17x9.jpg"), "rb").read())
    write("ycck_17x9", ycck(17, 9, seed + 1))
    with open(os.path.join(HERE, "420_17x9.jpg"), "rb") as f:
        src = f.read()
    for name, jpeg in broken(src).items():
        write(name, jpeg)


if __name__ == "__main__":
    main()
