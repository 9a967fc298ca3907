"""Model state: get_state_dict / get_parameters / load_state_dict, and safetensors files read and written as data.

safetensors: u64 little-endian header length N, N bytes of JSON `{name: {"dtype", "shape", "data_offsets": [begin,
end]}, "__metadata__": {str: str}}`, then the tensors' bytes (offsets relative to the end of the header). A file is
validated before its tensors are read: a malformed one raises ValueError naming the file and the problem, and never
executes anything. Reading the header costs O(its bytes): at most MAX_HEADER bytes (the format's own limit), scanned
for its nesting (at most HEADER_DEPTH deep) and its number of values (at most MAX_TOKENS) before json decodes it, so
a hostile header costs about 2 bytes per header byte and 50 per value, never GBs; a name or field given twice is
refused (other readers keep the first or the last: a file must not mean two things)."""
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
MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's limit (its HeaderTooLarge)
HEADER_DEPTH = 3  # the header object, a tensor's entry (or __metadata__), its shape and data_offsets lists
MAX_TOKENS = 1 << 22  # values, keys and containers of a header (~17 a tensor: ~240k tensors; json takes ~50 bytes each)
MAX_DIMS = 64  # of a tensor's shape (numpy's own limit)


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
  raise ValueError(f"{name} is not JSON")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  """An object's pairs as a dict; ValueError for a key given twice (json.loads keeps the last, others the first)."""
  out = dict(pairs)
  if len(out) != len(pairs):
    seen: set[str] = set()
    for k, _ in pairs:
      if k in seen:
        raise ValueError(f"{k!r} is given twice")
      seen.add(k)
  return out


_STRUCT = np.zeros(256, np.bool_)
_STRUCT[list(b'"[]{}')] = True
_OPENS = frozenset(b"[{")


def scan_header(raw: bytes) -> tuple[int, int]:
  """(values, depth) of a safetensors header's JSON, found in C-speed passes over its bytes before json decodes it:
  `values` counts (over-counts: in strings too) keys, values and containers. ValueError past MAX_TOKENS or deeper
  than HEADER_DEPTH. Costs the header's bytes once more (a mask) and 8 bytes per quote and bracket (<= MAX_TOKENS)."""
  text = raw.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in raw else raw  # escapes cannot end a string
  quotes, opens = text.count(b'"'), text.count(b"[") + text.count(b"{")
  values = quotes // 2 + opens + text.count(b",") + text.count(b":") + 1
  if values > MAX_TOKENS:
    raise ValueError(f"header holds {values:,} values or more, over the limit of {MAX_TOKENS:,}")
  b = np.frombuffer(text, np.uint8)
  chars = b[np.flatnonzero(_STRUCT[b])]  # quotes and brackets, in order (at most ~2 MAX_TOKENS of them)
  is_quote = chars == ord('"')
  outside = (np.cumsum(is_quote) % 2 == 0) & ~is_quote  # brackets after an even number of quotes
  br = chars[outside]
  step = np.where(np.isin(br, list(_OPENS)), 1, -1).astype(np.int32)
  depth = int(np.cumsum(step).max()) if len(step) else 0
  if depth > HEADER_DEPTH:
    raise ValueError(f"header nests {depth} deep; the format has {HEADER_DEPTH} levels")
  return values, depth


def _parse_header(raw: bytes, data_len: int, name: str) -> tuple[dict[str, tuple], dict[str, str]]:
  def bad(why: str) -> ValueError:
    return ValueError(f"safe_load: {name}: {why}")
  try:
    scan_header(raw)
  except ValueError as e:
    raise bad(str(e)) from None
  try:
    header = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, object_pairs_hook=_unique)
  except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
    raise bad(f"header is not UTF-8 JSON ({e})") from None
  except ValueError as e:  # a NaN or Infinity (_reject_constant), or a key given twice (_unique)
    raise bad(f"header: {e}") from None
  if not isinstance(header, dict):
    raise bad("header is not a JSON object")
  metadata = header.pop("__metadata__", {})
  if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
    raise bad("__metadata__ must map str to str")
  entries: dict[str, tuple] = {}
  for key, info in header.items():
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
      raise bad(f"{key!r}: an entry needs exactly dtype, shape and data_offsets")
    dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dt, str) or dt not in _ST_DTYPES:
      raise bad(f"{key!r}: unsupported dtype {dt!r}")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
      raise bad(f"{key!r}: shape {shape!r} is not a list of non-negative ints")
    if len(shape) > MAX_DIMS:
      raise bad(f"{key!r}: shape has {len(shape)} dims, over the limit of {MAX_DIMS}")
    if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)
            and 0 <= offs[0] <= offs[1] <= data_len):
      raise bad(f"{key!r}: data_offsets {offs!r} outside the {data_len} data bytes")
    if offs[1] - offs[0] != math.prod(shape) * _ST_DTYPES[dt].itemsize:
      raise bad(f"{key!r}: {offs[1] - offs[0]} bytes for a {dt} tensor of shape {shape}")
    entries[key] = (_ST_DTYPES[dt], tuple(shape), offs[0], offs[1])
  # the tensors tile the data exactly: no overlaps, no holes (as the format requires)
  end = 0
  for key, (_, _, b, e) in sorted(entries.items(), key=lambda kv: (kv[1][2], kv[1][3])):
    if b != end:
      raise bad(f"{key!r} starts at byte {b}, expected {end} (overlap or hole)")
    end = e
  if end != data_len:
    raise bad(f"the tensors cover {end} of {data_len} data bytes")
  return entries, metadata


def _read_header(f: Any, size: int, name: str) -> tuple[dict[str, tuple], dict[str, str], int]:
  """(entries, metadata, data start) of an open safetensors file of `size` bytes; reads only the header."""
  head = f.read(8)
  if len(head) < 8:
    raise ValueError(f"safe_load: {name}: {size} bytes is too short for a safetensors file")
  (n,) = struct.unpack("<Q", head)
  if n > MAX_HEADER or 8 + n > size:
    why = f"over the format's limit of {MAX_HEADER} bytes" if n > MAX_HEADER else f"the file has {size} bytes"
    raise ValueError(f"safe_load: {name}: header length {n} doesn't fit the file ({why})")
  raw = f.read(n)
  if len(raw) != n:
    raise ValueError(f"safe_load: {name}: the file ended inside the header")
  entries, metadata = _parse_header(raw, size - 8 - n, name)
  return entries, metadata, 8 + n


def safe_load(fn: str | os.PathLike) -> dict[str, Tensor]:
  """The tensors of a safetensors file (its header validated before the tensors' bytes are read)."""
  with open(fn, "rb") as f:
    size = os.fstat(f.fileno()).st_size
    entries, _, start = _read_header(f, size, os.fspath(fn))
    data = f.read()
  if len(data) != size - start:
    raise ValueError(f"safe_load: {os.fspath(fn)}: the file changed while being read")
  ret = {}
  for name, (dt, shape, b, _) in entries.items():
    arr = np.frombuffer(data, dtype=dt.np.newbyteorder("<"), count=math.prod(shape), offset=b)
    if dt == dtypes.bool and arr.size and arr.view(np.uint8).max() > 1:
      raise ValueError(f"safe_load: {os.fspath(fn)}: {name!r}: bool bytes other than 0 and 1")
    ret[name] = Tensor(arr.astype(dt.np).reshape(shape), dtype=dt)
  return ret
