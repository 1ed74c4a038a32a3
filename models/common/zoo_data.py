"""Readers for the data sets of the CIFAR-10, FEMNIST and Shakespeare recipes,
yielding rows in exactly the order fedcalib's dataset readers yield records,
so that row i of a recipe is record i of `fedcalib infer` and a partition
made by `fedcalib partition` fits both.

  CIFAR-10     imagefolder:ARCHIVE:train then imagefolder:ARCHIVE:test
               (archive order inside each; classes = sorted class dirs)
  FEMNIST      leaf:ARCHIVE:train then leaf:ARCHIVE:test (the .json members
               under a train/ or test/ directory, in archive order; users in
               file order)
  Shakespeare  roles:ARCHIVE (the .txt members in archive order; each role's
               text cleaned as LEAF does; every 80-character window whose
               next character is in the vocabulary, in text order)

The archives are read in place (never copied into the repository); decoded
CIFAR pixels are cached under $FEDCALIB_MODELS_CACHE (default
~/.cache/fedcalib-models), keyed by the archive's size and mtime.
"""

import io
import json
import os
import posixpath
import re
import tarfile

import numpy as np

# The shared data folder: ../shared/data from the repository root, or $FEDCALIB_DATA.
DATA = os.environ.get("FEDCALIB_DATA") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data"))
CIFAR10_TAR = os.path.join(DATA, "cifar10-jpeg.tar.gz")
FEMNIST_TAR = os.path.join(DATA, "femnist-leaf.tar.gz")
ROLES_TAR = os.path.join(DATA, "shakespeare-leaf-roles.tar.gz")

# LEAF's ALL_LETTERS (infer/data.ShakespeareLetters): token i is character i.
SHAKESPEARE_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
WINDOW = 80

IMAGE_EXT = (".png", ".jpg", ".jpeg")


def cache_dir():
    d = os.environ.get("FEDCALIB_MODELS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "fedcalib-models")
    os.makedirs(d, exist_ok=True)
    return d


def _member_path(name):
    return posixpath.normpath("/" + name).lstrip("/")


def read_imagefolder_tar(archive, sub):
    """Reads imagefolder:ARCHIVE:SUB as fedcalib does: classes are the sorted
    names of SUB's subdirectories, records the images (.png/.jpg/.jpeg) below
    them in archive order, as 8-bit RGB (PIL convert("RGB")).

    Returns images uint8 [N, H, W, 3] (HWC, all images the same size),
    labels int64 [N] and the class names."""
    from PIL import Image

    prefix = sub.strip("/") + "/" if sub.strip("/") else ""
    members = []
    classes = set()
    with tarfile.open(archive) as t:
        for m in t:
            name = _member_path(m.name)
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            if not rest:
                continue
            cls, _, rel = rest.partition("/")
            if not rel and not m.isdir():
                continue  # a file directly under the root belongs to no class
            classes.add(cls)
            if m.isfile() and rel and rel.lower().endswith(IMAGE_EXT):
                members.append((cls, m))
        classes = sorted(classes)
        label = {c: i for i, c in enumerate(classes)}
        images = []
        labels = np.empty(len(members), dtype=np.int64)
        for i, (cls, m) in enumerate(members):
            with Image.open(io.BytesIO(t.extractfile(m).read())) as im:
                images.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
            labels[i] = label[cls]
    return np.stack(images), labels, classes


def load_cifar10(archive=CIFAR10_TAR):
    """CIFAR-10 from the ImageFolder archive: the train subdirectory then the
    test one, 60,000 rows. Returns images uint8 [N, 32, 32, 3], labels int64,
    class names, and the fedcalib specs in row order."""
    st = os.stat(archive)
    key = os.path.join(cache_dir(), f"cifar10-jpeg-{st.st_size}-{int(st.st_mtime)}.npz")
    specs = [f"imagefolder:{archive}:train", f"imagefolder:{archive}:test"]
    if os.path.exists(key):
        z = np.load(key)
        return z["images"], z["labels"], [str(c) for c in z["classes"]], specs
    xs, ys, classes = [], [], None
    for sub in ("train", "test"):
        x, y, c = read_imagefolder_tar(archive, sub)
        if classes is not None and c != classes:
            raise ValueError(f"{archive}: train and test class lists differ")
        classes = c
        xs.append(x)
        ys.append(y)
    images, labels = np.concatenate(xs), np.concatenate(ys)
    tmp = key + ".tmp.npz"
    np.savez(tmp, images=images, labels=labels, classes=np.array(classes))
    os.replace(tmp, key)
    return images, labels, classes, specs


# LEAF's FEMNIST classes: digits, upper-case, lower-case letters.
FEMNIST_CLASSES = [str(d) for d in range(10)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)] + \
    [chr(c) for c in range(ord("a"), ord("z") + 1)]

# Mean and standard deviation of LEAF's pixel values over the train rows of
# the LEAF train files (1.0 = background, 0.0 = ink, so the mean is high).
FEMNIST_MEAN, FEMNIST_STD = 0.9612, 0.1656

# The preprocessing metadata of the FEMNIST models: LEAF's float pixels,
# scale 1, standardised by FEMNIST_MEAN and FEMNIST_STD.
FEMNIST_META = {
    "fedcalib.input.scale": "1",
    "fedcalib.input.mean": repr(FEMNIST_MEAN),
    "fedcalib.input.std": repr(FEMNIST_STD),
    "fedcalib.input.layout": "NCHW",
    "fedcalib.input.dtype": "float32",
}


def femnist_task_data():
    """The FEMNIST rows as a recipe's load() returns them: x, labels, the
    62 class names and the fedcalib specs."""
    x, labels, _, _, _, specs = load_femnist()
    return {"x": x, "labels": labels, "classes": FEMNIST_CLASSES, "specs": specs}


CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def cifar10_transform(torch, xb):
    """uint8 CHW pixels -> (pixel/255 - mean[c]) / std[c], the preprocessing
    the CIFAR-10 models' ONNX metadata records (scale 1/255, per-channel
    CIFAR10_MEAN and CIFAR10_STD), on xb's device."""
    m = torch.tensor(CIFAR10_MEAN, dtype=torch.float32, device=xb.device).view(1, 3, 1, 1)
    s = torch.tensor(CIFAR10_STD, dtype=torch.float32, device=xb.device).view(1, 3, 1, 1)
    return (xb.to(torch.float32) * (1.0 / 255.0) - m) / s


def femnist_transform(torch, xb):
    """LEAF's float pixels, [B,28,28] -> (x - MEAN)/STD as [B,1,28,28]: the
    metadata records scale 1 and this mean and std (FEMNIST_META)."""
    return ((xb - FEMNIST_MEAN) / FEMNIST_STD).unsqueeze(1)


def load_femnist(archive=FEMNIST_TAR):
    """FEMNIST in LEAF JSON: the train files then the test files, each in
    archive order, users in the file order of "user_data" (not of "users"),
    samples in user order (the records of leaf:ARCHIVE:train then
    leaf:ARCHIVE:test).

    Returns x float32 [N, 28, 28] (LEAF's values: 1.0 background, 0.0 ink),
    labels int64 [N], client int32 [N] (users numbered by first appearance
    over train then test), split uint8 [N] (0 train file, 2 test file), the
    user names, and the fedcalib specs in row order."""
    xs, ys, cl, sp = [], [], [], []
    users = {}
    for split_name, split_code in (("train", 0), ("test", 2)):
        with tarfile.open(archive) as t:
            for m in t:
                name = _member_path(m.name)
                if not (m.isfile() and name.endswith(".json")):
                    continue
                if split_name not in name.split("/")[:-1]:
                    continue
                doc = json.load(t.extractfile(m))
                # user_data in file order, as fedcalib's streaming reader
                # walks it (LEAF's "users" list is often in another order).
                for u, d in doc["user_data"].items():
                    uid = users.setdefault(u, len(users))
                    n = len(d["y"])
                    xs.append(np.asarray(d["x"], dtype=np.float32).reshape(n, 28, 28))
                    ys.append(np.asarray(d["y"], dtype=np.int64))
                    cl.append(np.full(n, uid, dtype=np.int32))
                    sp.append(np.full(n, split_code, dtype=np.uint8))
    specs = [f"leaf:{archive}:train", f"leaf:{archive}:test"]
    names = sorted(users, key=users.get)
    return (np.concatenate(xs), np.concatenate(ys), np.concatenate(cl), np.concatenate(sp),
            names, specs)


def leaf_text(raw):
    """LEAF's cleaning of a role's text (infer/data leafText): newlines
    become spaces and runs of spaces become one."""
    return re.sub(" +", " ", raw.replace("\n", " "))


def load_roles(archive=ROLES_TAR):
    """The records of roles:ARCHIVE: for each .txt member in archive order
    (one role), every 80-character window of its cleaned text whose next
    character is in the vocabulary, label = that character's index.

    Returns tokens uint8 [N, 80] (vocabulary indices), labels int64 [N],
    client int32 [N] (roles numbered in archive order, every role counted
    even one without windows; partition files number clients by first
    appearance, so use the partition's own columns), the role names, and
    the fedcalib spec."""
    lut = np.full(256, 255, dtype=np.uint8)
    for i, c in enumerate(SHAKESPEARE_LETTERS):
        lut[ord(c)] = i
    toks, labs, cls, names = [], [], [], []
    with tarfile.open(archive) as t:
        for m in t:
            if not (m.isfile() and m.name.lower().endswith(".txt")):
                continue
            text = leaf_text(t.extractfile(m).read().decode("utf-8"))
            codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
            tok = lut[codes]
            names.append(posixpath.splitext(posixpath.basename(m.name))[0])
            if len(tok) <= WINDOW:
                continue
            starts = np.arange(len(tok) - WINDOW)
            nxt = tok[starts + WINDOW]
            starts = starts[nxt != 255]
            win = tok[starts[:, None] + np.arange(WINDOW)[None, :]]
            if (win == 255).any():
                raise ValueError(f"{m.name}: a character outside the vocabulary")
            toks.append(win)
            labs.append(tok[starts + WINDOW].astype(np.int64))
            cls.append(np.full(len(starts), len(names) - 1, dtype=np.int32))
    return (np.concatenate(toks), np.concatenate(labs), np.concatenate(cls), names,
            [f"roles:{archive}"])
