#!/usr/bin/python3
"""Makes tests/models/data/gpt_tiny_golden.safetensors: the golden file of the models::GPT test
(DESIGN.md section 8, after llm.c's test_gpt2), from an independent PyTorch implementation
(tools/gpt_torch.py) of GPTConfig::tiny().

Run with Debian's interpreter and python3-torch (the test itself never needs torch):
    /usr/bin/python3 tools/make_gpt_golden.py [--out PATH]

The file holds, all f32 unless said:
    param.<name>   every parameter (names as models::GPT's state_dict), drawn from a fixed seed;
                   the LayerNorms get non-trivial weights and biases so their gradients matter
    tokens, targets  [B, T] I64, B = 2, T = context = 32
    logits         [B, T, vocab]
    loss           [] mean cross entropy
    grad.<name>    d loss / d param for every parameter (the tied wte gets both uses' sum)
    sgd_losses     [4] the loss before each of four SGD steps (lr 0.1, momentum 0.9) on the
                   same batch, starting from the same weights: the training loop end to end
and metadata with the config. The reference is computed in float64 from the f32 weights and
rounded once to f32, so the C++ f32 model's difference from it is its own rounding error.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import CONFIGS, GPT  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "tests", "models", "data", "gpt_tiny_golden.safetensors")
SGD_LR, SGD_MOMENTUM = 0.1, 0.9
DTYPE_NAMES = {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}


def save_safetensors(path, tensors, metadata):
    """A minimal writer of the standard format: u64 header length, JSON header, raw bytes."""
    header = {"__metadata__": metadata}
    offset = 0
    blobs = []
    for name, array in tensors:
        array = np.ascontiguousarray(array)
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": DTYPE_NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad so the data starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=20261123)
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)

    config = CONFIGS["tiny"]
    model = GPT(**config)
    with torch.no_grad():  # LayerNorm parameters away from 1 / 0 so their gradients are tested
        for name, p in model.named_parameters():
            if "ln_" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}  # f32

    b, t = 2, config["context"]
    tokens = torch.randint(0, config["vocab"], (b, t), dtype=torch.int64)
    targets = torch.randint(0, config["vocab"], (b, t), dtype=torch.int64)

    model = model.double()
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config["vocab"]),
                                             targets.reshape(-1))
    loss.backward()

    grads = [(f"grad.{n}", p.grad.float().numpy()) for n, p in model.named_parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=SGD_LR, momentum=SGD_MOMENTUM)
    sgd_losses = []
    for _ in range(4):
        opt.zero_grad()
        step_loss = torch.nn.functional.cross_entropy(model(tokens).reshape(-1, config["vocab"]),
                                                      targets.reshape(-1))
        sgd_losses.append(step_loss.item())
        step_loss.backward()
        opt.step()

    tensors = [(f"param.{n}", w.numpy()) for n, w in weights.items()]
    tensors += [("tokens", tokens.numpy()), ("targets", targets.numpy()),
                ("logits", logits.detach().float().numpy()),
                ("loss", loss.detach().float().numpy())]
    tensors += grads
    tensors.append(("sgd_losses", np.array(sgd_losses, dtype=np.float32)))
    metadata = {k: str(v) for k, v in config.items()}
    metadata.update(source="tools/make_gpt_golden.py", torch=torch.__version__,
                    seed=str(args.seed), batch=str(b), seq_len=str(t), sgd_lr=str(SGD_LR),
                    sgd_momentum=str(SGD_MOMENTUM))
    save_safetensors(args.out, tensors, metadata)
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(tensors)} tensors, {size} bytes, loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
