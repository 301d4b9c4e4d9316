"""mixprec.nn from Python: layers, Sequential, state dicts, precision, module files."""
import numpy as np
import pytest

import mixprec as mp


def test_sequential_forward_matches_its_layers():
    mp.manual_seed(3)
    first, second = mp.nn.Linear(4, 8), mp.nn.Linear(8, 2, bias=False)
    net = mp.nn.Sequential(first, mp.nn.ReLU(), second)
    x = mp.randn([5, 4])
    expected = mp.linear(mp.relu(mp.linear(x, first.weight, first.bias)), second.weight)
    np.testing.assert_array_equal(net(x).numpy(), expected.numpy())
    assert second.bias is None and first.weight.shape == (8, 4)
    assert [name for name in net.state_dict()] == ["0.weight", "0.bias", "2.weight"]
    assert len(net.parameters()) == 3 and all(p.requires_grad for p in net.parameters())


def test_training_a_sequential_with_adamw():
    mp.manual_seed(5)
    net = mp.nn.Sequential(mp.nn.Linear(8, 16), mp.nn.GELU(), mp.nn.LayerNorm([16]),
                           mp.nn.Linear(16, 2))
    opt = mp.AdamW(net.parameters(), lr=0.01)
    x = mp.randn([64, 8])
    y = mp.tensor(x.numpy()[:, 0] > 0).to("i64")
    for _ in range(80):
        opt.zero_grad()
        loss = mp.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    assert loss.item() < 0.1


def test_state_dict_round_trip_and_module_files(tmp_path):
    mp.manual_seed(9)
    a, b = mp.nn.Linear(3, 2), mp.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    with pytest.raises(mp.Error):
        b.load_state_dict({"weight": mp.zeros([2, 3])})  # strict: "bias" is missing
    path = str(tmp_path / "net.safetensors")
    mp.nn.save_module(a, path)
    c = mp.nn.Linear(3, 2)
    mp.nn.load_module(c, path)
    np.testing.assert_array_equal(a.weight.numpy(), c.weight.numpy())
    with pytest.raises(mp.Error):
        mp.nn.load_module(mp.nn.Linear(4, 2), path)  # shape mismatch named by the C++ loader


def test_to_bf16_keeps_norms_in_f32_and_eval_mode():
    net = mp.nn.Sequential(mp.nn.Linear(4, 4), mp.nn.LayerNorm([4]), mp.nn.Dropout(0.5))
    assert net.to("bf16") is net
    dtypes = {name: t.dtype for name, t in net.state_dict().items()}
    assert dtypes["0.weight"] == mp.bf16 and dtypes["1.weight"] == mp.f32
    net.eval()
    assert not net.training
    x = mp.ones([2, 4], "bf16")
    np.testing.assert_array_equal(net(x).numpy(), net(x).numpy())  # no dropout in eval


def test_conv_embedding_and_attention_layers():
    conv = mp.nn.Conv2d(3, 4, 3, padding=1)
    assert conv(mp.randn([1, 3, 8, 8])).shape == (1, 4, 8, 8)
    emb = mp.nn.Embedding(10, 6)
    assert emb(mp.tensor([[1, 2, 3]])).shape == (1, 3, 6)
    attn = mp.nn.MultiheadAttention(8, 2)
    assert attn(mp.randn([2, 5, 8]), causal=True).shape == (2, 5, 8)
    with pytest.raises(mp.Error):
        mp.nn.GELU("fast")
