"""The GPT of models::GPT (include/mixprec/models/gpt.h) in PyTorch, layer for layer and name for
name, so state dicts cross between the two unchanged. Used by tools/make_gpt_golden.py (the
golden test's independent implementation) and bench/peers/gpt_train.py (the training peer).

Pre-norm GPT-2: wte + wpe -> dropout -> blocks (x += drop(attn(ln_1(x))); x += drop(mlp(ln_2(x))))
-> ln_f -> logits = h wte^T (tied head). GELU is the tanh approximation, LayerNorm eps 1e-5,
causal attention without attention-probability dropout (the flash kernel of mixprec has none).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    # GPTConfig::tiny() and GPTConfig::small()
    "tiny": dict(vocab=256, context=32, layers=2, d_model=32, heads=4, dropout=0.0),
    "small": dict(vocab=256, context=256, layers=6, d_model=384, heads=6, dropout=0.0),
}


def causal_attention(q, k, v):
    """q, k, v [B, H, T, hd] -> [B, H, T, hd]."""
    if hasattr(F, "scaled_dot_product_attention"):  # PyTorch >= 2.0: its fused kernels
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = causal_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d_model, heads, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.dropout(self.attn(self.ln_1(x)))
        return x + self.dropout(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, d_model, heads, dropout=0.0):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(context, d_model)
        self.dropout = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(d_model, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        # GPT-2 init: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 layers)), zero biases.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif name.startswith(("wte", "wpe")) or (name.endswith(".weight") and "ln_" not in name):
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith(".bias") and "ln_" not in name:
                nn.init.zeros_(p)

    def forward(self, tokens):
        t = tokens.size(1)
        pos = torch.arange(t, device=tokens.device)
        x = self.dropout(self.wte(tokens) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head

    def loss(self, tokens, targets):
        logits = self(tokens)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


def num_parameters(model):
    return sum(p.numel() for p in model.parameters())
