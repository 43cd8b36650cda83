"""torch.save / torch.load of oxide tensors, with backend metadata (TensorBackendMetaRegistry)."""

import io

import pytest
import torch
import torch.nn as nn


def _round_trip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_default_location_restores_same_device():
    t = torch.randn(3, 4).to("oxide:1")
    back = _round_trip(t)
    assert back.device == torch.device("oxide:1")
    torch.testing.assert_close(back.cpu(), t.cpu(), rtol=0, atol=0)


@pytest.mark.parametrize(
    "location,expected",
    [
        ("cpu", "cpu"),
        ("oxide:1", "oxide:1"),
        (torch.device("oxide:0"), "oxide:0"),
        ({"oxide:1": "cpu"}, "cpu"),
        ({"oxide:1": "oxide:0"}, "oxide:0"),
    ],
    ids=["cpu", "oxide1", "device-object", "dict-to-cpu", "dict-to-oxide0"],
)
def test_map_location(location, expected):
    t = torch.arange(6.0).to("oxide:1")
    back = _round_trip(t, map_location=location)
    assert str(back.device) == expected
    assert back.cpu().tolist() == list(range(6))


def test_map_location_from_cpu_and_callable():
    cpu = torch.arange(4.0)
    assert _round_trip(cpu, map_location={"cpu": "oxide"}).device.type == "oxide"
    back = _round_trip(torch.ones(2).to("oxide"), map_location=lambda storage, loc: storage.oxide(1))
    assert back.device == torch.device("oxide:1")


def test_state_dict_round_trip():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).oxide()
    sd = _round_trip(model.state_dict())
    fresh = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).oxide()
    fresh.load_state_dict(sd)
    for (k, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert b.device.type == "oxide", k
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


def test_views_sharing_storage_stay_shared():
    base = torch.arange(10.0).to("oxide")
    d = _round_trip({"base": base, "view": base[2:5], "t": base.view(2, 5).t()})
    assert d["view"].untyped_storage().data_ptr() == d["base"].untyped_storage().data_ptr()
    assert d["t"].untyped_storage().data_ptr() == d["base"].untyped_storage().data_ptr()
    d["view"].fill_(-1.0)
    assert d["base"].cpu().tolist()[2:5] == [-1.0, -1.0, -1.0]
    assert d["t"].stride() == (1, 5)


def test_backend_metadata_survives():
    t = torch.randn(4).to("oxide")
    assert torch.ops.oxide.get_format(t) == 0
    torch.ops.oxide.set_format_(t, 1)
    assert torch.ops.oxide.get_format(t) == 1
    back = _round_trip(t)
    assert torch.ops.oxide.get_format(back) == 1
    plain = _round_trip(torch.randn(2).to("oxide"))
    assert torch.ops.oxide.get_format(plain) == 0
    with pytest.raises(ValueError, match="must be 0 \\(plain\\) or 1 \\(blocked\\)"):
        torch.ops.oxide.set_format_(t, 7)


def test_invalid_location_raises_clearly():
    buf = io.BytesIO()
    torch.save(torch.ones(2).to("oxide"), buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="device 99 but torch.oxide.device_count\\(\\) is 2"):
        torch.load(buf, map_location="oxide:99")
