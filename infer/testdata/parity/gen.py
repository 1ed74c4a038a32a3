#!/usr/bin/python3
"""Generates the parity sample and torchvision's reference tensors.

Run from this directory with Debian's python3 (python3-torchvision,
python3-pil, python3-numpy):

    /usr/bin/python3 gen.py

It writes images/<class>/<file>: JPEG and PNG images of sizes from 17x9 to
1600x1200 in every mode torchvision's loader converts (RGB at 4:2:0, 4:2:2
and 4:4:4 subsampling, grayscale, CMYK; PNG RGB, RGBA, L, LA, palette with
and without transparency, bilevel, 16-bit grayscale, 16-bit RGB) and with
EXIF orientations 2 to 8. For each configuration below it reads the folder
with torchvision.datasets.ImageFolder (whose loader opens each image with
PIL and converts it to RGB, applying no EXIF orientation) through
Resize + CenterCrop + ToTensor, and writes each tensor, times 255, as an
8-bit RGB PNG under ref/<config>/<class>/<file>.png (the imagenet
configuration for the jpeg and png classes only, to keep the sample small).
The Go test (../../parity_test.go) compares fedcalib's tensors with them.
"""
import os
import struct
import zlib

import numpy as np
import torch
from PIL import Image
from torchvision import datasets, transforms
from torchvision.transforms import InterpolationMode

torch.set_num_threads(2)

# name: (Resize argument, CenterCrop argument, interpolation, classes)
CONFIGS = {
    "imagenet": (256, 224, InterpolationMode.BILINEAR, ("jpeg", "png")),
    "bicubic64": (64, 56, InterpolationMode.BICUBIC, ("exif", "jpeg", "png")),
    "nearest64": (64, 56, InterpolationMode.NEAREST, ("exif", "jpeg", "png")),
    "lanczos40x30": ((40, 30), 32, InterpolationMode.LANCZOS, ("exif", "jpeg", "png")),
}


def pattern(w, h, seed):
    """A smooth pattern with sharp edges and fine stripes: it compresses,
    and it aliases when resampled without antialiasing."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.empty((h, w, 3))
    for c in range(3):
        fx, fy = rng.uniform(0.01, 0.2, 2)
        out[..., c] = 128 + 90 * np.sin(fx * x + fy * y + rng.uniform(0, 6))
    for _ in range(4):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        out[y0:y0 + h // 4 + 1, x0:x0 + w // 4 + 1] = rng.integers(0, 256, 3)
    return np.clip(out, 0, 255).astype(np.uint8)


def write_png16_rgb(path, a):
    """Writes a 16-bit RGB PNG, which PIL cannot save."""
    h, w, _ = a.shape
    raw = b"".join(b"\0" + a[y].astype(">u2").tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def main():
    os.makedirs("images/jpeg", exist_ok=True)
    os.makedirs("images/png", exist_ok=True)
    os.makedirs("images/exif", exist_ok=True)
    seed = 0

    def img(w, h):
        nonlocal seed
        seed += 1
        return Image.fromarray(pattern(w, h, seed))

    j = "images/jpeg/"
    img(1600, 1200).save(j + "rgb420_1600x1200.jpg", quality=70)
    img(640, 480).save(j + "rgb444_640x480.jpg", quality=85, subsampling=0)
    img(333, 500).save(j + "rgb422_333x500.jpg", quality=85, subsampling=1)
    img(17, 9).save(j + "rgb420_17x9.jpg", quality=90)
    img(9, 17).save(j + "rgb420_9x17.jpg", quality=90)
    img(300, 200).convert("L").save(j + "gray_300x200.jpg", quality=85)
    img(257, 190).convert("CMYK").save(j + "cmyk_257x190.jpg", quality=85)

    p = "images/png/"
    img(17, 9).save(p + "rgb_17x9.png")
    img(224, 224).save(p + "rgb_224x224.png")
    img(256, 256).save(p + "rgb_256x256.png")
    rgba = img(300, 200).convert("RGBA")
    rgba.putalpha(Image.fromarray(pattern(300, 200, 99)[..., 0]))
    rgba.save(p + "rgba_300x200.png")
    img(64, 48).convert("L").save(p + "l_64x48.png")
    img(200, 150).convert("LA").save(p + "la_200x150.png")
    img(150, 100).convert("P", palette=Image.ADAPTIVE, colors=64).save(p + "p_150x100.png")
    pt = img(120, 80).convert("P", palette=Image.ADAPTIVE, colors=16)
    pt.save(p + "ptrns_120x80.png", transparency=3)
    img(100, 80).convert("1").save(p + "bilevel_100x80.png")
    g16 = pattern(120, 90, 7)[..., 0].astype(np.uint16) * 3  # 0..765: the high byte is set in part
    Image.fromarray(g16).save(p + "gray16_120x90.png")
    write_png16_rgb(p + "rgb16_100x75.png", pattern(100, 75, 8).astype(np.uint16) * 257 + 3)

    e = "images/exif/"
    for o in range(2, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        img(120, 90).save(e + f"orient{o}_120x90.jpg", quality=85, exif=exif.tobytes())

    for name, (size, crop, interp, classes) in CONFIGS.items():
        tf = transforms.Compose([transforms.Resize(size, interp), transforms.CenterCrop(crop), transforms.ToTensor()])
        ds = datasets.ImageFolder("images", transform=tf)
        for (path, _), (x, _) in zip(ds.samples, ds):
            a = (x * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
            rel = os.path.relpath(path, "images")
            if rel.split(os.sep)[0] not in classes:
                continue
            out = os.path.join("ref", name, rel + ".png")
            os.makedirs(os.path.dirname(out), exist_ok=True)
            Image.fromarray(a).save(out, optimize=True)


if __name__ == "__main__":
    main()
