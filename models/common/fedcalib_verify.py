#!/usr/bin/python3
"""Measures an exported model through fedcalib itself, as a user would:
`fedcalib infer` over the data set spec(s) that results.json names (in row
order), the per-spec logits files concatenated into one (logits and labels;
client ids are left out since infer numbers them per file, and the partition
holds the real ones), then `fedcalib eval --partition` on the test and the
calibration split. Writes fedcalib.json next to results.json and prints the
comparison with the recipe's own figures (torch, PIL/JSON-decoded inputs).

When results.json has "eval_data" (a recipe whose full data is too large to
infer here, e.g. Shakespeare's 2.1 M windows), infer runs on that file,
which holds exactly the recipe's final test rows, and eval uses all of it.

  /usr/bin/python3 models/common/fedcalib_verify.py models/cifar10-cnn [--onnx PATH]

--logits F skips the inference and measures a logits file that `fedcalib
infer` already wrote over the same specs in the same order (the file `make
logits` leaves in ~/.cache/fedcalib/logits/NAME.npz), so a 45 MB ResNet18 is
not run twice over its data set; fedcalib.json then records that file.
Where the ONNX file is not kept (the ResNet18s of models/gpu-zoo.sh), the
model's SHA-256 is taken from the committed logits file's provenance.
  FEDCALIB="go run ./cmd/fedcalib" (default) selects the fedcalib command.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def fedcalib(*args):
    cmd = shlex.split(os.environ.get("FEDCALIB", "go run ./cmd/fedcalib")) + list(args)
    print("+", " ".join(shlex.quote(c) for c in cmd), flush=True)
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"fedcalib_verify: {cmd[0]} {args[0]} failed (exit {out.returncode}): {out.stderr.strip()}")
    return out.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--onnx", default=None, help="model file (default FOLDER/<results onnx file>)")
    p.add_argument("--threads", default="2", help="ONNX Runtime threads")
    p.add_argument("--logits", default=None,
                   help="a logits file fedcalib infer wrote over results.json's specs, in order "
                        "(default: run fedcalib infer now)")
    a = p.parse_args()
    res = json.load(open(os.path.join(a.folder, "results.json")))
    model = os.path.abspath(a.onnx or os.path.join(a.folder, res["onnx"]["file"]))
    rel = os.path.relpath(model, REPO)
    out = {"model": rel if not rel.startswith("..") else os.path.basename(model),
           "recipe_sha256": res["onnx"]["sha256"]}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        if "eval_data" in res:
            specs = [res["eval_data"]["spec"]]
        else:
            specs = res["specs"]
        if a.logits:
            logits = os.path.abspath(a.logits)
            out["logits_file"] = logits
        else:
            parts = []
            for i, spec in enumerate(specs):
                f = os.path.join(tmp, f"part{i}.npz")
                fedcalib("infer", "--model", model, "--data", spec, "--out", f, "--threads",
                         a.threads, "-q")
                parts.append(np.load(f))
            logits = os.path.join(tmp, "logits.npz")
            np.savez(logits, logits=np.concatenate([z["logits"] for z in parts]),
                     labels=np.concatenate([z["labels"] for z in parts]))
            out["infer_seconds"] = round(time.time() - t0, 1)
        out["specs"] = specs
        if "eval_data" in res:
            out["test"] = json.loads(fedcalib("eval", "--logits", logits, "--split", "all", "--json"))
            want = {"test": res["final"]["test"]}
        else:
            part = res["config"]["partition"]  # fedcalib reads .json.gz partitions too
            part_arg = os.path.join(REPO, part)
            out["partition"] = part
            for split in ("test", "calibration"):
                out[split] = json.loads(fedcalib("eval", "--logits", logits, "--partition", part_arg,
                                                 "--split", split, "--json"))
            want = res["final"]
    from hashlib import sha256
    if os.path.exists(model) or not a.logits:
        with open(model, "rb") as f:
            out["sha256"] = sha256(f.read()).hexdigest()
    else:
        # a committed logits file of a model not kept here (models/gpu-zoo.sh):
        # the SHA-256 its provenance records
        import numpy as np
        prov = json.loads(str(np.load(a.logits)["provenance"][0]))
        out["sha256"] = prov["model_sha256"]
        out["sha256_from"] = "the logits file's provenance (the ONNX file is not kept)"
    ok = out["sha256"] == res["onnx"]["sha256"]
    for split, w in want.items():
        g = out[split]
        out[split + "_recipe"] = {k: w[k] for k in ("n", "accuracy", "cwece", "ece", "nll")}
        print(f"{split}: fedcalib acc {g['accuracy']:.4f} cwECE {g['cwece']:.4f} ECE {g['ece']:.4f} "
              f"(n={g['n']}); recipe acc {w['accuracy']:.4f} cwECE {w['cwece']:.4f} (n={w['n']})")
        ok = ok and g["n"] == w["n"]
    out["sha256_matches_results"] = out["sha256"] == res["onnx"]["sha256"]
    path = os.path.join(a.folder, "fedcalib.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print(f"wrote {path}; sha256 {out['sha256']} {'matches' if out['sha256_matches_results'] else 'DIFFERS from'} results.json")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
