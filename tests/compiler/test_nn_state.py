"""State dicts and safetensors files: round trips, and malformed files rejected before anything is read."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from compiler import Tensor, dtypes, nn
from compiler.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save


@pytest.fixture(autouse=True)
def _interp(monkeypatch):
  monkeypatch.setenv("BACKEND", "interp")


class Net:
  def __init__(self):
    self.l1 = nn.Linear(3, 4)
    self.blocks = [nn.LayerNorm(4), nn.Linear(4, 2, bias=False)]


def test_state_dict_names_and_parameters():
  net = Net()
  sd = get_state_dict(net)
  assert list(sd) == ["l1.weight", "l1.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight"]
  assert get_parameters(net) == list(sd.values())


def test_load_state_dict_copies_values_and_checks_names_and_shapes():
  a, b = Net(), Net()
  load_state_dict(b, get_state_dict(a))
  for k, t in get_state_dict(b).items():
    np.testing.assert_array_equal(t.numpy(), get_state_dict(a)[k].numpy())
  sd = get_state_dict(a)
  with pytest.raises(KeyError, match="missing"):
    load_state_dict(b, {k: v for k, v in sd.items() if k != "l1.bias"})
  with pytest.raises(ValueError, match="shape"):
    load_state_dict(b, {**sd, "l1.bias": Tensor.zeros(5)})
  load_state_dict(b, {"l1.bias": Tensor.zeros(4)}, strict=False)
  np.testing.assert_array_equal(b.l1.bias.numpy(), np.zeros(4))


def test_safetensors_round_trip(tmp_path):
  tensors = {"f32": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), "f16": Tensor(np.array([1.5], np.float16)),
             "i64": Tensor(np.array([-(2 ** 40), 7], np.int64)), "b": Tensor(np.array([True, False])),
             "u8": Tensor(np.array([[255]], np.uint8)), "empty": Tensor.zeros(0, 3)}
  fn = tmp_path / "m.safetensors"
  safe_save(tensors, fn, metadata={"format": "pt"})
  raw = fn.read_bytes()
  (n,) = struct.unpack("<Q", raw[:8])
  assert n % 8 == 0 and json.loads(raw[8:8 + n])["__metadata__"] == {"format": "pt"}
  back = safe_load(fn)
  assert list(back) == list(tensors)
  for k, t in tensors.items():
    assert back[k].dtype == t.dtype and back[k].shape == t.shape
    np.testing.assert_array_equal(back[k].numpy(), t.numpy())


def _file(tmp_path, header, data=b"", length=None):
  text = json.dumps(header).encode() if not isinstance(header, bytes) else header
  fn = tmp_path / "bad.safetensors"
  fn.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
  return fn


GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}


@pytest.mark.parametrize("header,data,length,msg", [
  (GOOD, b"\0" * 8, 10 ** 12, "header length"),
  (b"\xff\xfe", b"", None, "UTF-8 JSON"),
  (b'{"a": NaN}', b"", None, "not JSON"),
  (b"[1, 2]", b"", None, "JSON object"),
  ({"a": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, None, "exactly"),
  ({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, None, "unsupported dtype"),
  ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, None, "non-negative"),
  ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]}}, b"\0" * 8, None, "outside"),
  ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, None, "bytes for"),
  ({**GOOD, "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, None, "overlap"),
  (GOOD, b"\0" * 12, None, "cover"),
  ({**GOOD, "__metadata__": {"k": 1}}, b"\0" * 8, None, "metadata"),
  ({"a": {"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]}}, b"\x07", None, "bool"),
])
def test_malformed_files_are_rejected(tmp_path, header, data, length, msg):
  with pytest.raises(ValueError, match=msg):
    safe_load(_file(tmp_path, header, data, length))


def test_too_short_file(tmp_path):
  (tmp_path / "s").write_bytes(b"\1\0")
  with pytest.raises(ValueError, match="too short"):
    safe_load(tmp_path / "s")
  assert safe_load(_file(tmp_path, GOOD, np.array([1.0, 2.0], np.float32).tobytes()))["a"].dtype == dtypes.float32
