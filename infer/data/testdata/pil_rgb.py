"""Writes to stdout the RGB pixels PIL decodes for every image of an
ImageFolder archive, in archive order: for each member whose extension
fedcalib's imagefolder reads (.png, .jpg, .jpeg) below a class directory,
a line "H W" and then H×W×3 bytes of Image.open(f).convert("RGB").

    /usr/bin/python3 infer/data/testdata/pil_rgb.py ARCHIVE.tar.gz

TestRealCIFAR10JPEGMatchesPIL compares them with fedcalib's pixels.
"""

import io
import sys
import tarfile

import numpy as np
from PIL import Image


def main():
    out = sys.stdout.buffer
    with tarfile.open(sys.argv[1]) as tar:
        for m in tar:
            name = m.name.lstrip("./")
            if not m.isfile() or "/" not in name or not name.lower().endswith((".png", ".jpg", ".jpeg")):
                continue
            im = Image.open(io.BytesIO(tar.extractfile(m).read())).convert("RGB")
            a = np.asarray(im, dtype=np.uint8)
            out.write(b"%d %d\n" % a.shape[:2])
            out.write(a.tobytes())


if __name__ == "__main__":
    main()
