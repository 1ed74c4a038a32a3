"""Generates testdata/jpeg: small JPEGs of odd sizes and the RGB pixels
PIL (libjpeg-turbo, default decompression) decodes them to.

Run with the PIL the comparison targets:

    /usr/bin/python3 infer/data/testdata/gen_jpeg.py

For each NAME it writes NAME.jpg and NAME.rgb, the H×W×3 bytes of
Image.open("NAME.jpg").convert("RGB"). The images are smooth colour
gradients plus seeded noise, so that the chroma planes vary and the
upsampler's edge handling shows. The output is deterministic for a given
PIL and libjpeg build.
"""

import os

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


def main():
    os.makedirs(HERE, exist_ok=True)
    for seed, (name, w, h, mode, sub, q, prog) in enumerate(CASES):
        path = os.path.join(HERE, name + ".jpg")
        image(w, h, mode, seed).save(path, "JPEG", quality=q, subsampling=sub, progressive=prog)
        rgb = np.asarray(Image.open(path).convert("RGB"), dtype=np.uint8)
        assert rgb.shape == (h, w, 3)
        with open(os.path.join(HERE, name + ".rgb"), "wb") as f:
            f.write(rgb.tobytes())


if __name__ == "__main__":
    main()
