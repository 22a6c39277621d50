#!/usr/bin/env python3
"""check_hf_export.py — does Hugging Face transformers read `flashgpt export --format hf` as
the same model? Runs on the GPU machine (it has torch, transformers, safetensors); everything
here runs on the CPU in fp32.

  1. flashgpt export --checkpoint M --out OUT/hf --format hf
  2. flashgpt eval --checkpoint M --data DATA --device cpu --batch B --seq-len T --steps N --json
     (our fp32 CPU model: the loss over N batches of B windows of T+1 tokens, in order)
  3. transformers.GPT2LMHeadModel.from_pretrained(OUT/hf) in float32, eager attention, on the
     same windows (read here from the shards the way flashgpt's data loader reads them without
     shuffling: sorted val_*.bin, windows of T+1 tokens at multiples of T, a shard's leftover
     windows short of a batch skipped): mean cross-entropy over the B*T*N targets.
  4. The two losses must agree to fp32 rounding: |hf - ours| <= 1e-5 x ours (both fp32; they
     differ only in summation order). Also `flashgpt eval --checkpoint OUT/hf`, our reader of
     the export, must give our loss to the printed digits.

Usage (the checkpoint's tokenizer.bin, if any, is beside it):
  python3 scripts/check_hf_export.py --flashgpt build/flashgpt --checkpoint M --data DATA_DIR \
      [--batch 4] [--seq-len T] [--steps 8] [--out DIR]
  python3 scripts/check_hf_export.py --flashgpt build/flashgpt [--out DIR]
      (no checkpoint: makes one — a synthetic corpus, `flashgpt prepare`, 30 CPU steps of a
      2-layer model — so that the check needs nothing but the binary)
Prints a short report; exit status 0 when the losses agree, 1 otherwise.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import GPT2LMHeadModel

SHARD_MAGIC, SHARD_VERSION = 20240520, 1
REL_TOL = 1e-5


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout, end="", flush=True)
    if r.returncode != 0:
        sys.exit(f"check_hf_export: command failed with status {r.returncode}")
    return r.stdout


def read_shard(path):
    """An llm.c token shard: 256 x int32 header (magic, version, count), then uint16 tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        assert header[0] == SHARD_MAGIC and header[1] == SHARD_VERSION, f"{path}: not a shard"
        tokens = np.frombuffer(f.read(), dtype="<u2")
    assert len(tokens) == header[2], f"{path}: {len(tokens)} tokens, header says {header[2]}"
    return tokens.astype(np.int64)


def batches(pattern, B, T, n):
    """The first n (B, T+1) batches, in flashgpt's unshuffled data-loader order."""
    out = []
    for path in sorted(glob.glob(pattern)):
        tokens = read_shard(path)
        windows = (len(tokens) - 1) // T
        usable = windows // B * B
        for b0 in range(0, usable, B):
            out.append(np.stack([tokens[w * T: w * T + T + 1] for w in range(b0, b0 + B)]))
            if len(out) == n:
                return out
    sys.exit(f"check_hf_export: '{pattern}' holds only {len(out)} batches of {B} x {T}, not {n}")


def make_checkpoint(flashgpt, work):
    """A small trained checkpoint and its data, made with flashgpt itself."""
    rng = random.Random(11)
    subj = ["the cat", "a dog", "my friend", "the old man", "every child", "the bird"]
    verb = ["sees", "likes", "finds", "wants", "watches", "follows"]
    obj = ["the ball", "a red apple", "the small house", "a green tree", "the river"]
    text = os.path.join(work, "corpus.txt")
    with open(text, "w") as f:
        for _ in range(3000):
            for _ in range(rng.randint(2, 5)):
                f.write(f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)}. ")
            f.write("\n%\n")
    data = os.path.join(work, "data")
    run([flashgpt, "prepare", "--input", text, "--out", data, "--vocab-size", "300",
         "--val-fraction", "0.1"])
    run([flashgpt, "train", "--data", data, "--device", "cpu", "--model", "tiny", "--layers", "2",
         "--seq-len", "64", "--batch", "8", "--steps", "30", "--lr", "3e-3", "--warmup", "5",
         "--eval-every", "0", "--sample-every", "0", "--out", os.path.join(work, "run"), "--quiet"])
    return os.path.join(work, "run", "model_00000030.bin"), data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashgpt", required=True, help="path to build/flashgpt")
    ap.add_argument("--checkpoint", help="model_*.bin (default: make one)")
    ap.add_argument("--data", help="directory with val_*.bin (with --checkpoint)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=0, help="0 = the model's n_positions")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", help="directory for the export and the logs (default: a temporary one)")
    a = ap.parse_args()
    if bool(a.checkpoint) != bool(a.data):
        sys.exit("check_hf_export: give --checkpoint and --data together (or neither)")
    flashgpt = os.path.abspath(a.flashgpt)
    work = a.out or tempfile.mkdtemp(prefix="check_hf_export_")
    os.makedirs(work, exist_ok=True)
    ckpt, data = (a.checkpoint, a.data) if a.checkpoint else make_checkpoint(flashgpt, work)

    hf_dir = os.path.join(work, "hf")
    run([flashgpt, "export", "--checkpoint", ckpt, "--out", hf_dir, "--format", "hf"])
    with open(os.path.join(hf_dir, "config.json")) as f:
        config = json.load(f)
    T = a.seq_len or config["n_positions"]
    common = ["--data", data, "--device", "cpu", "--batch", str(a.batch), "--seq-len", str(T),
              "--steps", str(a.steps)]
    ours_json = os.path.join(work, "eval_ours.json")
    run([flashgpt, "eval", "--checkpoint", ckpt, *common, "--json", ours_json])
    with open(ours_json) as f:
        ours = json.load(f)
    back_json = os.path.join(work, "eval_export.json")
    run([flashgpt, "eval", "--checkpoint", hf_dir, *common, "--json", back_json])
    with open(back_json) as f:
        back = json.load(f)

    torch.manual_seed(0)
    try:
        model = GPT2LMHeadModel.from_pretrained(hf_dir, dtype=torch.float32,
                                                attn_implementation="eager")
    except TypeError:  # transformers before `dtype=`
        model = GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32,
                                                attn_implementation="eager")
    model = model.float().eval()
    V = config["vocab_size"]
    loss_sum, count = 0.0, 0
    with torch.no_grad():
        for batch in batches(os.path.join(data, "val_*.bin"), a.batch, T, a.steps):
            x = torch.from_numpy(batch[:, :-1].copy())
            y = torch.from_numpy(batch[:, 1:].copy())
            logits = model(input_ids=x).logits.float()
            assert logits.shape[-1] == V
            loss_sum += F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="sum").item()
            count += y.numel()
    hf_loss = loss_sum / count
    ours_loss = ours["loss"]
    rel = abs(hf_loss - ours_loss) / abs(ours_loss)
    ok = rel <= REL_TOL and count == ours["tokens"] and back["loss"] == ours_loss
    lines = [
        f"check_hf_export: transformers {transformers.__version__}, torch {torch.__version__}, CPU fp32",
        f"  checkpoint {ckpt}: L={config['n_layer']} C={config['n_embd']} NH={config['n_head']} "
        f"V={V} n_positions={config['n_positions']}",
        f"  tokens          {count} ({a.steps} batches x {a.batch} x {T}) from {data}/val_*.bin",
        f"  flashgpt eval   loss {ours_loss:.9f}",
        f"  flashgpt eval of the export (our reader) loss {back['loss']:.9f}",
        f"  GPT2LMHeadModel loss {hf_loss:.9f}",
        f"  |difference| / loss = {rel:.2e} (tolerance {REL_TOL:.0e}: {100 * rel / REL_TOL:.1f}% of it)",
        f"  {'PASS' if ok else 'FAIL'}",
    ]
    report = "\n".join(lines)
    print(report)
    with open(os.path.join(work, "check_hf_export.txt"), "w") as f:
        f.write(report + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
