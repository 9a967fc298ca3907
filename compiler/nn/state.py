"""Model state: get_state_dict / get_parameters / load_state_dict, and safetensors files read and written as data.

safetensors: u64 little-endian header length N, N bytes of JSON `{name: {"dtype", "shape", "data_offsets": [begin,
end]}, "__metadata__": {str: str}}`, then the tensors' bytes (offsets relative to the end of the header). A file is
validated before anything is read from it: a malformed one raises ValueError, never executes or allocates more than
the file holds."""
from __future__ import annotations

import json
import math
import os
import struct
from typing import Any

import numpy as np

from compiler.dtype import dtypes
from compiler.tensor import Tensor

# safetensors dtype names (bfloat16 and the fp8 kinds have no numpy dtype here: refused with a clear error)
_ST_DTYPES = {"F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16, "I64": dtypes.int64,
              "I32": dtypes.int32, "I16": dtypes.int16, "I8": dtypes.int8, "U64": dtypes.uint64, "U32": dtypes.uint32,
              "U16": dtypes.uint16, "U8": dtypes.uint8, "BOOL": dtypes.bool}
_ST_NAMES = {dt: name for name, dt in _ST_DTYPES.items()}
MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's limit


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable through attributes, lists, tuples and dicts, named by its path ("l1.weight")."""
  if isinstance(obj, Tensor):
    return {prefix.rstrip("."): obj}
  if isinstance(obj, (list, tuple)):
    items = ((str(i), v) for i, v in enumerate(obj))
  elif isinstance(obj, dict):
    items = ((str(k), v) for k, v in obj.items())
  elif hasattr(obj, "__dict__") and not isinstance(obj, type):
    items = iter(vars(obj).items())
  else:
    return {}
  ret: dict[str, Tensor] = {}
  for k, v in items:
    ret.update(get_state_dict(v, f"{prefix}{k}."))
  return ret


def get_parameters(obj: Any) -> list[Tensor]:
  """The Tensors of get_state_dict, each once."""
  return list(dict.fromkeys(get_state_dict(obj).values()))


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True) -> None:
  """Copy state_dict's tensors into the model's (same names, shapes and dtypes); strict: every name must be there."""
  own = get_state_dict(model)
  missing = [k for k in own if k not in state_dict]
  if strict and missing:
    raise KeyError(f"load_state_dict: missing {missing}")
  unexpected = [k for k in state_dict if k not in own]
  if strict and unexpected:
    raise KeyError(f"load_state_dict: unexpected {unexpected}")
  done = []
  for k, t in own.items():
    if k not in state_dict:
      continue
    v = state_dict[k]
    if v.shape != t.shape:
      raise ValueError(f"load_state_dict: {k} has shape {v.shape}, the model's {t.shape}")
    t.assign(v.cast(t.dtype))
    done.append(t)
  if done:
    Tensor.realize(*done)


def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write tensors to a safetensors file."""
  header: dict[str, Any] = {}
  if metadata:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
      raise TypeError("safe_save: metadata must map str to str")
    header["__metadata__"] = dict(metadata)
  blobs, offset = [], 0
  for name, t in tensors.items():
    if not isinstance(name, str) or name == "__metadata__":
      raise ValueError(f"safe_save: invalid tensor name {name!r}")
    if t.dtype not in _ST_NAMES:
      raise TypeError(f"safe_save: {name}: dtype {t.dtype} has no safetensors name")
    data = np.ascontiguousarray(t.numpy()).astype(t.dtype.np.newbyteorder("<"), copy=False).tobytes()
    header[name] = {"dtype": _ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
  text = json.dumps(header, separators=(",", ":")).encode()
  text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
  with open(fn, "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for b in blobs:
      f.write(b)


def _reject_constant(name: str) -> Any:
  raise ValueError(f"safe_load: {name} is not JSON")


def _parse_header(raw: bytes, data_len: int) -> tuple[dict[str, tuple], dict[str, str]]:
  try:
    header = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
  except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
    raise ValueError(f"safe_load: header is not UTF-8 JSON ({e})") from None
  if not isinstance(header, dict):
    raise ValueError("safe_load: header is not a JSON object")
  metadata = header.pop("__metadata__", {})
  if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
    raise ValueError("safe_load: __metadata__ must map str to str")
  entries: dict[str, tuple] = {}
  for name, info in header.items():
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
      raise ValueError(f"safe_load: {name!r}: an entry needs exactly dtype, shape and data_offsets")
    dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dt, str) or dt not in _ST_DTYPES:
      raise ValueError(f"safe_load: {name!r}: unsupported dtype {dt!r}")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
      raise ValueError(f"safe_load: {name!r}: shape {shape!r} is not a list of non-negative ints")
    if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)
            and 0 <= offs[0] <= offs[1] <= data_len):
      raise ValueError(f"safe_load: {name!r}: data_offsets {offs!r} outside the {data_len} data bytes")
    if offs[1] - offs[0] != math.prod(shape) * _ST_DTYPES[dt].itemsize:
      raise ValueError(f"safe_load: {name!r}: {offs[1] - offs[0]} bytes for a {dt} tensor of shape {shape}")
    entries[name] = (_ST_DTYPES[dt], tuple(shape), offs[0], offs[1])
  # the tensors tile the data exactly: no overlaps, no holes (as the format requires)
  end = 0
  for name, (_, _, b, e) in sorted(entries.items(), key=lambda kv: (kv[1][2], kv[1][3])):
    if b != end:
      raise ValueError(f"safe_load: {name!r} starts at byte {b}, expected {end} (overlap or hole)")
    end = e
  if end != data_len:
    raise ValueError(f"safe_load: the tensors cover {end} of {data_len} data bytes")
  return entries, metadata


def _parse(data: bytes) -> tuple[dict[str, tuple], dict[str, str], int]:
  if len(data) < 8:
    raise ValueError(f"safe_load: {len(data)} bytes is too short for a safetensors file")
  (n,) = struct.unpack("<Q", data[:8])
  if n > MAX_HEADER or 8 + n > len(data):
    raise ValueError(f"safe_load: header length {n} doesn't fit the file ({len(data)} bytes)")
  entries, metadata = _parse_header(data[8:8 + n], len(data) - 8 - n)
  return entries, metadata, 8 + n


def safe_load(fn: str | os.PathLike) -> dict[str, Tensor]:
  """The tensors of a safetensors file (validated first)."""
  with open(fn, "rb") as f:
    data = f.read()
  entries, _, start = _parse(data)
  ret = {}
  for name, (dt, shape, b, _) in entries.items():
    arr = np.frombuffer(data, dtype=dt.np.newbyteorder("<"), count=math.prod(shape), offset=start + b)
    if dt == dtypes.bool and arr.size and arr.view(np.uint8).max() > 1:
      raise ValueError(f"safe_load: {name!r}: bool bytes other than 0 and 1")
    ret[name] = Tensor(arr.astype(dt.np).reshape(shape), dtype=dt)
  return ret
