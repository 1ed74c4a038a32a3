#!/usr/bin/env python3
"""ResNet-50-shaped model, a generated JPEG ImageFolder, and the PyTorch peer
for bench/infer.sh (issues #29 and #32). Nothing here is needed by the tests.

  resnet50_shaped.py model OUT.onnx          torchvision resnet50, random weights
                                             (torch.manual_seed(0)), opset 17,
                                             input "input" [batch,3,224,224],
                                             output "logits" [batch,1000]
  resnet50_shaped.py images DIR N            N JPEG photos-like images (quality 90,
                                             500x375 or 375x500, 4 classes) in
                                             DIR/class_k/, as an ImageFolder
  resnet50_shaped.py torch DIR THREADS WORKERS BATCH
                                             torchvision ImageFolder + DataLoader
                                             (WORKERS workers) feeding the same
                                             model (same seed) with Resize(256),
                                             CenterCrop(224), ToTensor, Normalize;
                                             prints images/s of the whole loop

Run with /usr/bin/python3 (Debian's torch and torchvision).
"""
import os
import sys
import time

import torch
import torchvision


def build(threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = torchvision.models.resnet50(weights=None)
    m.eval()
    return m


def cmd_model(out):
    m = build(2)
    x = torch.zeros(1, 3, 224, 224)
    torch.onnx.export(m, x, out, opset_version=17, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    print(f"wrote {out} ({os.path.getsize(out) >> 20} MiB)")


def cmd_images(d, n):
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for i in range(n):
        w, h = (500, 375) if i % 3 else (375, 500)
        # smooth random fields, like photographs: a coarse grid upsampled, plus noise
        coarse = rng.integers(0, 256, size=(h // 25 + 1, w // 25 + 1, 3), dtype=np.uint8)
        img = Image.fromarray(coarse).resize((w, h), Image.BICUBIC)
        a = np.asarray(img).astype(np.int16) + rng.integers(-12, 13, size=(h, w, 3))
        img = Image.fromarray(a.clip(0, 255).astype(np.uint8))
        sub = os.path.join(d, f"class_{i % 4}")
        os.makedirs(sub, exist_ok=True)
        img.save(os.path.join(sub, f"img_{i:05d}.jpg"), quality=90)
    print(f"wrote {n} JPEG images under {d}")


def cmd_torch(d, threads, workers, batch):
    import torchvision.transforms as T
    m = build(threads)
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(d, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, shuffle=False)
    n = 0
    t0 = time.perf_counter()
    with torch.inference_mode():
        for x, _ in dl:
            m(x)
            n += x.shape[0]
    dt = time.perf_counter() - t0
    print(f"torch {n} images {dt:.3f} s {n / dt:.2f} images/s threads {threads} workers {workers}")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "model":
        cmd_model(args[0])
    elif cmd == "images":
        cmd_images(args[0], int(args[1]))
    elif cmd == "torch":
        cmd_torch(args[0], int(args[1]), int(args[2]), int(args[3]))
    else:
        sys.exit(__doc__)
