#!/usr/bin/python3
"""shakespeare-lstm: LEAF's Shakespeare model (Caldas et al. 2018,
models/shakespeare/stacked_lstm.py): embedding 8 over the 80-letter
vocabulary (infer/data.ShakespeareLetters), 2 stacked LSTM layers of 256,
dense 80 on the last step (0.82 M parameters, ~3.3 MB of ONNX, committed).
Input = int64 token indices [batch, 80], output = logits of the next letter.

Data: the records of fedcalib's roles:shakespeare-leaf-roles.tar.gz (every
80-letter window of each role's cleaned text, label = next letter; 2.14 M
rows), partitioned naturally by role by `fedcalib partition --scheme
natural --min-samples 100 --fractions 0.9,0.05,0.05` (LEAF's 90/10 sample
split with half the test rows as calibration). The 2 CPU cores cannot
afford LEAF's full local epochs: every participant trains on a random
subset of --max-client-rows of its windows per round, and the loss is the
next-letter cross-entropy at all 80 positions of a window (the exported
model still predicts from the last step only). See CARD.md.

Run from the repository root:  nice -n 10 /usr/bin/python3 models/shakespeare-lstm/train.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "common"))
import zoo_data  # noqa: E402
import zoo_recipe  # noqa: E402

V = zoo_data.SHAKESPEARE_LETTERS


def build(torch):
    nn = torch.nn

    class StackedLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(len(V), 8)
            self.lstm = nn.LSTM(8, 256, num_layers=2, batch_first=True)
            self.fc = nn.Linear(256, len(V))

        def forward_all(self, x):
            """Logits of the next letter after every position: [B, 80, 80]."""
            h, _ = self.lstm(self.embedding(x))
            return self.fc(h)

        def forward(self, x):
            h, _ = self.lstm(self.embedding(x))
            return self.fc(h[:, -1, :])

    return StackedLSTM()


def loss_fn(model, xb, yb):
    """Cross-entropy of the next letter at every position: the targets of a
    window are its own letters 1..79 and then its label."""
    import torch
    import torch.nn.functional as F
    logits = model.forward_all(xb)
    target = torch.cat([xb[:, 1:], yb[:, None]], dim=1)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))



def transform(torch, xb):
    return xb.to(torch.int64)


def write_eval(data, rows, path):
    """Writes the rows as one LEAF JSON file (x = the 80-letter window, y =
    the next letter), users in row order, so that `fedcalib infer --data
    leaf:PATH` yields exactly these rows in this order."""
    users, user_data = [], {}
    # Row order = role order (the roles reader emits role by role), so one
    # pass keeps the rows in order; each run of a role becomes one user.
    tok, labels = data["x"], data["labels"]
    run = 0
    prev = None
    cur = None
    for r in rows:
        c = data["client_of_row"][r]
        if c != prev:
            name = f"{data['roles'][c]}#{run}"
            run += 1
            cur = {"x": [], "y": []}
            users.append(name)
            user_data[name] = cur
            prev = c
        cur["x"].append("".join(V[t] for t in tok[r]))
        cur["y"].append(V[labels[r]])
    doc = {"users": users, "num_samples": [len(user_data[u]["y"]) for u in users],
           "user_data": user_data}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)
    return f"leaf:{path}"


def load_with_roles():
    tok, labels, client, roles, specs = zoo_data.load_roles()
    return {"x": tok, "labels": labels, "classes": None, "specs": specs,
            "client_of_row": client, "roles": roles}


TASK = {
    "name": "shakespeare-lstm",
    "description": "fedcalib shakespeare-lstm: LEAF stacked LSTM (embedding 8, 2x256 LSTM, dense "
                   "80), FedAvg on LEAF Shakespeare roles, natural partition by role; input = "
                   "int64 letter indices [N,80], output = next-letter logits",
    "load": load_with_roles,
    "transform": transform,
    "build": build,
    "loss_fn": loss_fn,
    "write_eval": write_eval,
    "dummy": lambda torch: torch.zeros(1, 80, dtype=torch.int64),
    "base_meta": {
        "fedcalib.input.layout": "NC",
        "fedcalib.input.dtype": "int64",
        "fedcalib.input.vocab": V,
    },
    "partition": os.path.join(HERE, "..", "partitions", "shakespeare-roles-natural.json.gz"),
    "defaults": {
        "rounds": 100,
        "sample_rate": 0.01,
        "local_epochs": 1,
        "batch_size": 32,
        "client_lr": 0.8,
        "momentum": 0.0,
        "server_lr": 1.0,
        "max_client_rows": 512,
        "eval_max_rows": 500,
        "final_max_rows": 2000,
        "seed": 1,
        "threads": 1,
        "eval_every": 10,
    },
    "out": HERE,
}

if __name__ == "__main__":
    zoo_recipe.main(sys.argv[1:], TASK)
