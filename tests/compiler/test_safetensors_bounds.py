"""safe_load on hostile headers (issue 31): the header's cost is bounded before json decodes it, and a name or field
given twice is refused instead of the last one winning."""
from __future__ import annotations

import json
import struct
import tracemalloc

import numpy as np
import pytest

from compiler.nn import state
from compiler.nn.state import HEADER_DEPTH, MAX_TOKENS, safe_load, safe_save, scan_header
from compiler.tensor import Tensor

ENTRY = '{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'


def _file(tmp_path, header: bytes, data: bytes = b"\0" * 8, name: str = "h.safetensors"):
  fn = tmp_path / name
  fn.write_bytes(struct.pack("<Q", len(header)) + header + data)
  return fn


def test_duplicate_tensor_name_is_refused(tmp_path):
  fn = _file(tmp_path, f'{{"a":{ENTRY},"a":{ENTRY}}}'.encode())
  with pytest.raises(ValueError, match=r"h\.safetensors: header: 'a' is given twice"):
    safe_load(fn)


def test_duplicate_field_is_refused(tmp_path):
  fn = _file(tmp_path, b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"dtype":"I32"}}')
  with pytest.raises(ValueError, match="'dtype' is given twice"):
    safe_load(fn)
  fn = _file(tmp_path, f'{{"__metadata__":{{"k":"1","k":"2"}},"a":{ENTRY}}}'.encode())
  with pytest.raises(ValueError, match="'k' is given twice"):
    safe_load(fn)


def test_deep_nesting_is_refused_before_decoding(tmp_path, monkeypatch):
  nest = "[" * 50 + "]" * 50
  fn = _file(tmp_path, f'{{"a":{{"dtype":"F32","shape":{nest},"data_offsets":[0,8]}}}}'.encode())
  monkeypatch.setattr(state.json, "loads", lambda *a, **k: pytest.fail("json decoded a header it should refuse"))
  with pytest.raises(ValueError, match=f"h.safetensors: header nests 52 deep; the format has {HEADER_DEPTH}"):
    safe_load(fn)


def test_too_many_values_are_refused_before_decoding(tmp_path):
  n = MAX_TOKENS + 10
  header = ('{"a":{"dtype":"F32","shape":[' + "0," * n + '0],"data_offsets":[0,0]}}').encode()
  fn = _file(tmp_path, header, b"")
  tracemalloc.start()
  try:
    with pytest.raises(ValueError, match="over the limit of"):
      safe_load(fn)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  # the header read, and no more: json would hold a str of it and a list of n ints (8 bytes each) at once
  assert peak < 1.5 * len(header), (peak, len(header))


def test_scan_counts_values_and_depth_outside_strings():
  meta = json.dumps({"cfg": '{"a": [[[[1]]]], "q": "x\\"[[{{"}', "path": "C:\\\\dir\\\\"})
  raw = f'{{"__metadata__":{meta},"a":{ENTRY}}}'.encode()
  values, depth = scan_header(raw)
  assert depth == 3 and values >= 17  # brackets and quotes inside strings (escaped ones too) do not nest
  assert json.loads(raw)  # (the header is valid JSON)


def test_roundtrip_with_metadata_holding_brackets(tmp_path):
  fn = tmp_path / "ok.safetensors"
  cfg = '{"layers": [[1, 2], [3]], "name": "a\\"[[b", "dir": "x\\\\"}'
  safe_save({"w": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))}, fn, metadata={"config": cfg})
  back = safe_load(fn)
  np.testing.assert_array_equal(back["w"].numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_too_many_dims_and_header_length(tmp_path):
  fn = _file(tmp_path, ('{"a":{"dtype":"F32","shape":[' + "1," * 70 + '2],"data_offsets":[0,8]}}').encode())
  with pytest.raises(ValueError, match="71 dims, over the limit of 64"):
    safe_load(fn)
  big = tmp_path / "big.safetensors"
  big.write_bytes(struct.pack("<Q", state.MAX_HEADER + 1) + b"{}")
  with pytest.raises(ValueError, match="big.safetensors: header length .*over the format's limit"):
    safe_load(big)
