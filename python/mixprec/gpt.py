"""mixprec.gpt: the GPT application (docs/GPT.md) from Python.

The model, its trainer and its sampler are the C++ ones `mixprec train gpt` runs, so the same
settings give the same bits: the same weights after every step, the same losses, the same text.

    import mixprec as mp
    data = mp.gpt.TextDataset.from_file("data/shakespeare.txt")     # bytes are the tokens
    model = mp.gpt.GPT(mp.gpt.GPTConfig(context=64, layers=2, d_model=64, heads=4), seed=0)
    trainer = mp.gpt.Trainer(model, data, precision="bf16", batch=8, steps=200, seed=0)
    for step in range(200):
        loss = trainer.step(step)            # batch `step` of the seeded stream, one AdamW step
    print(mp.gpt.generate(model, "ROMEO:", 100, seed=1))
    trainer.save("gpt.safetensors")          # mp.gpt.load("gpt.safetensors") gives the model back

A model written by `mixprec train gpt --out DIR` loads with mp.gpt.load("DIR/checkpoint.safetensors").
"""
from __future__ import annotations

from ._mixprec import GPT, GPTConfig, GPTTrainSettings, Tensor, TextDataset, _GPTTrainer
from ._mixprec import _generate, load_gpt
from ._tensor import tensor

_DEFAULTS = GPTTrainSettings()  # `mixprec train gpt`'s defaults, from the C++ side
_SETTINGS = [name for name in dir(GPTTrainSettings) if not name.startswith("_")]


def load(checkpoint: str, heads: int = 0) -> GPT:
    """The model of a training checkpoint, with its parameters in the checkpoint's dtypes.

    The sizes come from the file; `heads` is needed only for checkpoints written before the
    head count was recorded.
    """
    return load_gpt(checkpoint, heads)


class Trainer(_GPTTrainer):
    """The training loop of `mixprec train gpt`, one optimizer step per step(index) call.

    step(i) trains on batch i of the stream seeded by `seed` under `precision` ("auto", "fp32",
    "bf16", "fp16", "bf16-params", "fp16-params"): autocast, loss scaling (f16), gradient
    clipping, AdamW with f32 master weights for 16-bit parameters, the warm-up + cosine learning
    rate. The defaults are the command line's; the model is converted to the precision's
    parameter dtype here (build it in f32). Returns the step's loss (f32, unscaled).
    graph=True replays each micro-batch's forward and backward from a graph captured at the
    first step (`train gpt --graph`): the same bits, no allocation per step.
    """

    def __init__(self, model: GPT, data: TextDataset, precision: str = _DEFAULTS.precision,
                 batch: int = _DEFAULTS.batch, lr: float = _DEFAULTS.lr,
                 warmup: int = _DEFAULTS.warmup, steps: int = _DEFAULTS.steps,
                 weight_decay: float = _DEFAULTS.weight_decay, clip: float = _DEFAULTS.clip,
                 seed: int = _DEFAULTS.seed, grad_accum: int = _DEFAULTS.grad_accum,
                 checkpoint_activations: bool = _DEFAULTS.checkpoint_activations,
                 rounding: str = _DEFAULTS.rounding, loss_scale: float = _DEFAULTS.loss_scale,
                 fallback_after: int = _DEFAULTS.fallback_after, graph: bool = _DEFAULTS.graph):
        given = locals()
        settings = GPTTrainSettings()
        for name in _SETTINGS:
            setattr(settings, name, given[name])
        super().__init__(model, data, settings)


def encode(text: str) -> list[int]:
    """The byte tokens of text (UTF-8): the GPT's vocabulary of 256."""
    return list(text.encode("utf-8"))


def decode(tokens) -> str:
    """Text from byte tokens (invalid UTF-8 shown as U+FFFD, as the command line prints it)."""
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def generate(model: GPT, prompt, max_new_tokens: int, temperature: float = 0.8, top_k: int = 40,
             seed: int = 0, decoding: str = "replayed"):
    """Samples max_new_tokens tokens after `prompt` (models/gpt_generate.h).

    prompt: a str (returns the str with its continuation), a list of token ids (returns the
    list), or a [B, T] i64 Tensor (returns [B, T + max_new_tokens]). temperature 0 is greedy;
    top_k 0 samples from every token. `mixprec train gpt --seed S` prints the text of
    generate(model, prompt, n, 0.8, 40, seed=S + 1). decoding: "replayed" (the KV cache, each
    new token replayed from a captured graph), "cached" (the KV cache through the op front-ends)
    or "window" (the whole window every step, the reference).
    """
    if isinstance(prompt, Tensor):
        return _generate(model, prompt, max_new_tokens, temperature, top_k, seed, decoding)
    tokens = encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
    if not tokens:
        raise ValueError("[generate] the prompt needs at least one token")
    out = _generate(model, tensor([tokens]), max_new_tokens, temperature, top_k, seed,
                    decoding)[0].tolist()
    return decode(out) if isinstance(prompt, str) else out


__all__ = ["GPT", "GPTConfig", "GPTTrainSettings", "TextDataset", "Trainer", "decode", "encode",
           "generate", "load"]
