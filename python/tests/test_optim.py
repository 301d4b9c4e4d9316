"""Optimizers and GradScaler from Python, against numpy references of PyTorch's update rules."""
import numpy as np
import pytest

import mixprec as mp


def quadratic_grad(p, target):
    """Sets p.grad to the gradient of sum((p - target)^2) through autograd."""
    d = p - target
    mp.sum(mp.mul(d, d)).backward()


def test_sgd_with_momentum_matches_the_reference():
    target = mp.tensor([1.0, -2.0, 3.0])
    p = mp.tensor([0.0, 0.0, 0.0]).requires_grad_()
    opt = mp.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01)
    ref, buf = np.zeros(3), None
    for _ in range(5):
        opt.zero_grad()
        quadratic_grad(p, target)
        opt.step()
        g = 2 * (ref - target.numpy()) + 0.01 * ref
        buf = g if buf is None else 0.9 * buf + g
        ref = ref - 0.1 * buf
    np.testing.assert_allclose(p.numpy(), ref, rtol=1e-5)
    assert opt.step_count(0) == 5 and opt.state(0, "momentum_buffer") is not None
    assert opt.master(0) is None  # f32 parameters need no master copy


def test_adamw_matches_the_reference():
    rng = np.random.default_rng(4)
    start = rng.standard_normal(8).astype(np.float32)
    target = mp.tensor(rng.standard_normal(8))
    p = mp.tensor(start).requires_grad_()
    opt = mp.AdamW([p], lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    ref, m, v = start.astype(np.float64), np.zeros(8), np.zeros(8)
    for step in range(1, 11):
        opt.zero_grad()
        quadratic_grad(p, target)
        opt.step()
        g = 2 * (ref - target.numpy())
        ref = ref * (1 - 0.05 * 0.1)  # decoupled decay
        m = 0.8 * m + 0.2 * g
        v = 0.99 * v + 0.01 * g * g
        ref = ref - 0.05 * (m / (1 - 0.8**step)) / (np.sqrt(v / (1 - 0.99**step)) + 1e-6)
    np.testing.assert_allclose(p.numpy(), ref, rtol=1e-4, atol=1e-6)
    opt.lr = 0.01
    assert opt.lr == 0.01 and "AdamW" in repr(opt)


def test_bf16_parameters_keep_f32_master_weights():
    p = mp.tensor([1.0, 2.0]).to("bf16").requires_grad_()
    opt = mp.SGD([p], lr=1e-3)
    for _ in range(3):
        opt.zero_grad()
        mp.sum(p.to("f32")).backward()  # gradient 1 everywhere
        opt.step()
    master = opt.master(0)
    assert master.dtype == mp.f32 and p.dtype == mp.bf16
    np.testing.assert_allclose(master.numpy(), [0.997, 1.997], rtol=1e-6)
    # The parameter is its master rounded once to nearest even.
    np.testing.assert_array_equal(p.numpy().view(np.uint16),
                                  master.to("bf16").numpy().view(np.uint16))
    stochastic = mp.AdamW([mp.ones([4], "bf16").requires_grad_()], rounding="stochastic", seed=3)
    assert stochastic.rounding == "stochastic"
    with pytest.raises(mp.Error, match="rounding"):
        mp.SGD([p], rounding="up")


def test_grad_scaler_skips_overflowing_steps_and_backs_off():
    p = mp.tensor([1.0, 1.0]).requires_grad_()
    opt = mp.SGD([p], lr=0.5)
    scaler = mp.GradScaler(init_scale=1024.0, growth_interval=2)
    for x, stepped in [([1.0, 1.0], True), ([float("inf"), 1.0], False)]:
        opt.zero_grad()
        scaler.scale(mp.sum(mp.mul(p, mp.tensor(x)))).backward()
        assert scaler.step(opt) is stepped
        scaler.update()
    np.testing.assert_allclose(p.numpy(), [0.5, 0.5])  # the clean step, unscaled; not the inf one
    assert scaler.get_scale() == 512.0 and scaler.skipped_steps == 1 and scaler.last_step_skipped
    assert scaler.state_dict()["scale"] == 512.0


def test_a_training_loop_with_pytorch_names():
    # The loop a PyTorch user ports: AdamW, autocast, GradScaler, zero_grad / step / update.
    mp.manual_seed(1)
    x = mp.randn([128, 8])
    y = mp.tensor(x.numpy().sum(1) > 0).to("i64")
    w1 = (mp.randn([16, 8]) * 0.3).requires_grad_()
    w2 = (mp.randn([2, 16]) * 0.3).requires_grad_()
    opt = mp.AdamW([w1, w2], lr=0.02)
    scaler = mp.GradScaler()
    for _ in range(60):
        opt.zero_grad()
        with mp.autocast("f16"):
            loss = mp.cross_entropy(mp.linear(mp.relu(mp.linear(x, w1)), w2), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    assert loss.item() < 0.2
