"""mixprec.graph from Python: a Python function captured and replayed like a C++ one."""
import numpy as np
import pytest

import mixprec as mp


def _mlp():
    mp.manual_seed(4)
    return mp.nn.Sequential(mp.nn.Linear(16, 32), mp.nn.GELU(), mp.nn.Linear(32, 16))


def test_a_python_function_replays_bit_identically_without_its_front_ends():
    net = _mlp()
    fn = lambda xs: [mp.add(net(xs[0]), xs[0])]  # noqa: E731
    g = mp.graph.capture(fn, [mp.randn([4, 16])], fuse_epilogues=False)
    assert g.ops() == ["linear_packed", "gelu_erf", "linear_packed", "add"]
    assert g.memory["arena_bytes"] > 0 and "arena" in g.to_string()
    for _ in range(3):
        x = mp.randn([4, 16])
        with mp.inference_mode():
            eager = fn([x])[0]
        np.testing.assert_array_equal(g.run([x])[0].numpy(), eager.numpy())
    with pytest.raises(mp.Error, match="captured as"):
        g.run([mp.randn([5, 16])])
    # By default the GELU and the add fold into the linear layers' epilogues: one rounding
    # instead of two, close to eager.
    folded = mp.graph.capture(fn, [x])
    assert folded.ops() == ["linear_packed+gelu_erf", "linear_packed+add"]
    assert folded.fused_epilogues == 2
    np.testing.assert_allclose(folded.run([x])[0].numpy(), eager.numpy(), rtol=1e-5, atol=1e-6)


def test_autocast_casts_fold_into_the_kernels_that_make_their_input():
    net = _mlp()  # f32 weights; under bf16 autocast the linear layers run in bf16

    def fn(xs):
        with mp.autocast("bf16"):
            return [mp.add(net(xs[0]), xs[0])]

    x = mp.randn([4, 16])
    plain = mp.graph.capture(fn, [x], fuse_epilogues=False)
    folded = mp.graph.capture(fn, [x])
    # The input's and the biases' casts stay (no kernel makes them); the output's goes into the
    # last linear layer, with the residual add.
    assert folded.ops()[-1] == "linear_packed+to_f32+add", folded.to_string()
    assert folded.ops().count("copy") == plain.ops().count("copy") - 1
    with mp.inference_mode():
        eager = fn([x])[0]
    np.testing.assert_array_equal(plain.run([x])[0].numpy(), eager.numpy())
    np.testing.assert_allclose(folded.run([x])[0].numpy(), eager.numpy(), rtol=2e-2, atol=2e-2)


def test_a_training_step_replays_the_eager_gradients():
    net = _mlp()
    params = net.parameters()
    step = mp.graph.with_gradients(lambda xs: mp.mse_loss(net(xs[0]), xs[1]), params)
    x, y = mp.randn([8, 16]), mp.randn([8, 16])
    g = mp.graph.capture(step, [x, y], autograd=True)
    opt = mp.AdamW(params, lr=0.01)
    for _ in range(3):
        x, y = mp.randn([8, 16]), mp.randn([8, 16])
        eager = step([x, y])
        out = g.run([x, y])
        assert len(out) == len(params) + 1
        for a, b in zip(eager, out):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        mp.graph.set_gradients(params, out)
        opt.step()  # the next replay reads the updated weights
        opt.zero_grad()


def test_random_draws_are_refused_by_name():
    with pytest.raises(mp.Error, match="random"):
        mp.graph.capture(lambda xs: [mp.add(xs[0], mp.randn([2]))], [mp.randn([2])])


def test_the_gpt_trainer_replays_its_steps_with_the_same_bits():
    import os
    corpus = os.path.join(os.path.dirname(__file__), "..", "..", "data", "shakespeare.txt")
    data = mp.gpt.TextDataset.from_file(corpus)
    losses = []
    for graph in (False, True):
        model = mp.gpt.GPT(mp.gpt.GPTConfig(context=16, layers=1, d_model=32, heads=2), seed=0)
        trainer = mp.gpt.Trainer(model, data, precision="bf16", batch=2, steps=3, warmup=1,
                                 graph=graph)
        losses.append([trainer.step(i) for i in range(3)])
    assert losses[0] == losses[1]


def test_compile_captures_once_per_signature():
    net = _mlp()

    @mp.graph.compile
    def forward(x, y):
        return mp.add(net(x), y)

    x, y = mp.randn([4, 16]), mp.randn([4, 16])
    with mp.inference_mode():
        eager = mp.add(net(x), y)
    first = forward(x, y)
    np.testing.assert_allclose(first.numpy(), eager.numpy(), rtol=1e-5, atol=1e-6)
    forward(mp.randn([4, 16]), mp.randn([4, 16]))
    assert forward.captures == 1 and forward.graph().size >= 2
    forward(mp.randn([6, 16]), mp.randn([6, 16]))  # another shape: captured again
    assert forward.captures == 2

    @mp.graph.compile(fuse_epilogues=False)
    def pair(x):
        return [net(x), mp.neg(x)]

    out = pair(x)
    with mp.inference_mode():
        np.testing.assert_array_equal(out[0].numpy(), net(x).numpy())
    np.testing.assert_array_equal(out[1].numpy(), -x.numpy())
