"""A small GPT trained on Shakespeare with mixprec, in mixed precision: the loop a PyTorch user
writes (nanoGPT's), ported line for line. bf16 autocast, AdamW, gradient clipping; numpy makes
the batches. Run from the repository root:

    python3 python/examples/train_gpt.py [STEPS] [CORPUS]
"""
import sys

import numpy as np
import mixprec as mp

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 500
corpus = sys.argv[2] if len(sys.argv) > 2 else "data/shakespeare.txt"
data = np.fromfile(corpus, dtype=np.uint8)  # bytes are the tokens
batch, context = 8, 64
model = mp.gpt.GPT(mp.gpt.GPTConfig(context=context, layers=4, d_model=128, heads=4), seed=0)
opt = mp.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
rng = np.random.default_rng(0)
for step in range(steps):
    ix = rng.integers(0, len(data) - context - 1, batch)
    x = mp.tensor(np.stack([data[i:i + context] for i in ix]).astype(np.int64))
    y = mp.tensor(np.stack([data[i + 1:i + 1 + context] for i in ix]).astype(np.int64))
    with mp.autocast("bf16"):  # matmuls in bf16; softmax, norms and the loss in f32
        logits = model(x)
        loss = mp.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    opt.zero_grad()
    loss.backward()
    mp.nn.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if step % 50 == 0 or step == steps - 1:
        print(f"step {step}: loss {loss.item():.4f}", flush=True)
print(mp.gpt.generate(model, "ROMEO:", 200, temperature=0.8, top_k=40, seed=1))
