"""mixprec.gpt against `mixprec train gpt`: the same settings give the same bits (issue #21)."""
import os
import subprocess

import numpy as np
import pytest

import mixprec as mp

CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "data", "shakespeare.txt")
TINY = dict(context=32, layers=2, d_model=32, heads=4)
RUN = dict(batch=2, warmup=2, steps=4, seed=5)
PROMPT, SAMPLE_TOKENS = "ROMEO:", 40


def cli():
    path = os.environ.get("MIXPREC_CLI")
    if not path:
        pytest.skip("MIXPREC_CLI (the mixprec binary) is set by the python.pytest CTest entry")
    return path


def train_with_cli(out, precision):
    args = [cli(), "train", "gpt", "--corpus", CORPUS, "--precision", precision,
            "--context", "32", "--layers", "2", "--d-model", "32", "--heads", "4",
            "--batch", "2", "--warmup", "2", "--steps", "4", "--seed", "5",
            "--eval-every", "0", "--eval-batches", "1", "--out", str(out),
            "--prompt", PROMPT, "--sample-tokens", str(SAMPLE_TOKENS)]
    done = subprocess.run(args, capture_output=True, env=dict(os.environ, MIXPREC_NUM_THREADS="1"),
                          timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    header = b"--- sample (temperature 0.8, top-k 40) ---\n"
    stdout = done.stdout
    assert header in stdout, stdout
    validation = float(stdout.split(b"validation loss ")[1].split(b";")[0])
    return os.path.join(out, "checkpoint.safetensors"), validation, stdout.split(header)[1][:-1]


def bits(t):
    return np.asarray(t.contiguous()).view(np.uint8).copy()


@pytest.mark.parametrize("precision", ["bf16", "fp16-params"])
def test_training_and_sampling_match_the_command_line_bit_for_bit(tmp_path, precision):
    checkpoint, cli_validation, cli_sample = train_with_cli(tmp_path / "run", precision)

    data = mp.gpt.TextDataset.from_file(CORPUS)
    model = mp.gpt.GPT(mp.gpt.GPTConfig(**TINY), seed=RUN["seed"])
    trainer = mp.gpt.Trainer(model, data, precision=precision, **RUN)
    losses = [trainer.step(i) for i in range(RUN["steps"])]
    assert all(np.isfinite(losses))
    assert f"{trainer.evaluate(1):.4f}" == f"{cli_validation:.4f}"

    # The weights: the command line's checkpoint holds exactly the Python-trained model.
    loaded = mp.gpt.load(checkpoint)
    mine, theirs = model.state_dict(), loaded.state_dict()
    assert list(mine) == list(theirs)
    for name in mine:
        assert mine[name].dtype == theirs[name].dtype, name
        np.testing.assert_array_equal(bits(mine[name]), bits(theirs[name]), err_msg=name)
    want_dtype = mp.f16 if precision == "fp16-params" else mp.f32
    assert theirs["wte.weight"].dtype == want_dtype and theirs["ln_f.weight"].dtype == mp.f32

    # The sample: the text the command line printed, from the trained and the loaded model.
    tokens = mp.gpt.generate(model, mp.gpt.encode(PROMPT), SAMPLE_TOKENS, 0.8, 40,
                             seed=RUN["seed"] + 1)
    assert bytes(tokens) == cli_sample
    assert mp.gpt.generate(loaded, PROMPT, SAMPLE_TOKENS, seed=RUN["seed"] + 1) == \
        mp.gpt.decode(tokens)


def test_trainer_checkpoints_resume_bit_for_bit(tmp_path):
    data = mp.gpt.TextDataset.from_file(CORPUS)
    straight = mp.gpt.GPT(mp.gpt.GPTConfig(**TINY), seed=1)
    trainer = mp.gpt.Trainer(straight, data, precision="bf16-params", **dict(RUN, seed=1))
    for i in range(4):
        trainer.step(i)

    path = str(tmp_path / "gpt.safetensors")
    first = mp.gpt.GPT(mp.gpt.GPTConfig(**TINY), seed=1)
    before = mp.gpt.Trainer(first, data, precision="bf16-params", **dict(RUN, seed=1))
    before.step(0), before.step(1)
    before.save(path)
    assert mp.gpt.load(path).config.heads == TINY["heads"]
    resumed_model = mp.gpt.GPT(mp.gpt.GPTConfig(**TINY), seed=99)  # weights come from the file
    resumed = mp.gpt.Trainer(resumed_model, data, precision="bf16-params", **dict(RUN, seed=1))
    resumed.load(path)
    resumed.step(2), resumed.step(3)
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed_model.state_dict().items()):
        np.testing.assert_array_equal(bits(a), bits(b), err_msg=name)


def test_model_forward_loss_and_generate_forms():
    mp.manual_seed(0)
    model = mp.gpt.GPT(mp.gpt.GPTConfig.tiny(), seed=0)
    assert model.num_parameters() > 0 and "GPT" in model.summary()
    tokens = mp.tensor([mp.gpt.encode("hello world")])
    assert model(tokens).shape == (1, 11, 256)
    assert model.loss(tokens[:, :10].contiguous(), tokens[:, 1:].contiguous()).dtype == mp.f32
    greedy = mp.gpt.generate(model, tokens, 5, temperature=0.0)
    assert greedy.shape == (1, 16) and greedy.dtype == mp.i64
    assert mp.gpt.generate(model, list(greedy[0, :11].tolist()), 5, temperature=0.0) == \
        greedy[0].tolist()
    for decoding in ("cached", "window"):
        assert mp.gpt.generate(model, "hello world", 5, temperature=0.0, decoding=decoding) == \
            mp.gpt.decode(greedy[0].tolist())
    x, y = mp.gpt.TextDataset(mp.gpt.encode("abcdefgh" * 20)).batch(0, batch=3, context=8)
    assert x.shape == y.shape == (3, 8)


def test_bad_input_raises_clear_errors(tmp_path):
    with pytest.raises(mp.Error, match="heads must divide"):
        mp.gpt.GPTConfig(d_model=30, heads=4)
    module = str(tmp_path / "linear.safetensors")
    mp.nn.save_module(mp.nn.Linear(2, 2), module)
    with pytest.raises(mp.Error, match=r"\[load_gpt\].*not a GPT training checkpoint"):
        mp.gpt.load(module)
    with pytest.raises(mp.Error):
        mp.gpt.load(str(tmp_path / "missing.safetensors"))
    model = mp.gpt.GPT(mp.gpt.GPTConfig.tiny())
    data = mp.gpt.TextDataset(mp.gpt.encode("abc" * 100))
    with pytest.raises(mp.Error, match="precision"):
        mp.gpt.Trainer(model, data, precision="fp8")
    with pytest.raises(mp.Error, match="rounding"):
        mp.gpt.Trainer(model, data, rounding="up")
    with pytest.raises(mp.Error, match="split"):
        data.size("test")
