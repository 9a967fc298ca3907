"""The export's HTML page: templates/index.html with the style, the icon and the page's two scripts inline (boot.js,
and the UI's module: the export's own scripts, SHIM, then bundle.py's bundle), the data packed (pack.py), deflated and
in base-85 digits in a <script type="application/json"> block (no `<`, `>` or `&` can appear in it, so no trace string
can end the block), and a Content-Security-Policy that allows only those scripts and style (by hash) and no
connection at all."""
from __future__ import annotations

import base64
import hashlib
import html
import itertools
import json
import re
import time
import zlib
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import numpy as np

from viz_server.app import package_dir
from viz_server.export import ExportError
from viz_server.export.bundle import bundle
from viz_server.export.pack import pack as pack_data

_HERE = Path(__file__).resolve().parent
# the page's own scripts, before the UI's bundle in its module: the structural hash, the data's decoder, the graph
# and diff routes, the router; and the one script the page starts with (it inflates the module and runs it)
SHIM = tuple(_HERE / f"{name}.js" for name in ("hash", "unpack", "graphs", "diff", "shim"))
BOOT = _HERE / "boot.js"
# RFC 1924's base-85 digits, with the four a page would have to escape swapped for unused ones (boot.js)
_B85 = str.maketrans("&<>`", ",./:")
# the 85 digits in order, as bytes (b85: RFC 1924's alphabet, base64.b85encode's, with _B85's swaps)
_DIGITS = np.frombuffer(
  "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~".translate(_B85).encode(),
  dtype=np.uint8)
_FAVICON = "data:image/svg+xml;base64,"
_MARK = "\0tinyviz-data\0"  # where the data's digits go in the page (no template or script holds a NUL)
PIECE_ITEMS = 4096  # a long list's items per piece of the data's JSON text as it is deflated (write)
DEFLATE_TEXT = 64 << 10  # the pieces' text handed to zlib at a time (_write_digits)
# zlib's level for the page's two parts (issue 30: the deflate is most of the export's serial end). CPU s and bytes of
# the data's deflate, levels 6, 7, 9: the demo 0.08, 0.10, 0.23 s and 443, 439, 433 KB; a GPT training step 0.56,
# 0.71, 1.49 s and 2.79, 2.76, 2.70 MB. 7: most of 6's time for less of its size (a training step's page was 2.87x
# its trace at 9: ~2.93x so, within issue 30's 3x)
DEFLATE_LEVEL = 7
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode  # (json.dumps makes an encoder a call with separators)


def _sha256(text: str) -> str:
  return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def _script_json(obj: Any) -> str:
  """JSON safe inside a <script> element: no `<`, `>` or `&` (so no `</script>`), no line separators."""
  text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
  return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def ui_module() -> str:
  """The text of the page's module: the export's scripts, then the UI's bundle."""
  return "\n".join(p.read_text(encoding="utf-8") for p in SHIM) + "\n" + bundle(package_dir("static"))


def _shell(data: dict, source_name: str) -> tuple[str, str]:
  """The HTML page around its embedded data's digits: (the text before them, the text after); data: collect()'s or
  its packed form (the note reads `redacted` and `contexts_only`)."""
  static = package_dir("static")
  page = (package_dir("templates") / "index.html").read_text(encoding="utf-8")
  script = ui_module()
  boot = BOOT.read_text(encoding="utf-8")
  css = (static / "style.css").read_text(encoding="utf-8")
  if "</style" in css.lower():
    raise ExportError("static/style.css contains '</style', which cannot be inlined")
  icon = _FAVICON + base64.b64encode((static / "favicon.svg").read_bytes()).decode()
  csp = (f"default-src 'none'; script-src {_sha256(boot)} {_sha256(script)}; style-src {_sha256(css)}; img-src data:; "
         "connect-src 'none'; font-src 'none'; media-src 'none'; frame-src 'none'; worker-src 'none'; "
         "object-src 'none'; base-uri 'none'; form-action 'none'")
  blob = '{"format":2,"encoding":"deflate+base85","ui":' + _script_json(_digits(script)) + ',"data":{"data":"' + _MARK
  head = re.search(r'<meta http-equiv="Content-Security-Policy"\s+content="[^"]*">', page)
  if head is None:
    raise ExportError("templates/index.html: no Content-Security-Policy meta tag to replace")
  tag = f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp, quote=False)}">'
  page = page[:head.start()] + tag + page[head.end():]
  swaps = [
    ('<html lang="en">', '<html lang="en" data-socketio="no" data-export="yes">'),
    ('<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">',
     f'<link rel="icon" href="{icon}" type="image/svg+xml">'),
    ('<link rel="stylesheet" href="/static/style.css">', f"<style>{css}</style>"),
    ('<script src="/static/boot.js"></script>', ""),  # (the page's early /api/boot: none here)
    ('<script type="module" src="/static/app.js"></script>',
     f'<script type="application/json" id="tinyviz-export">{blob}</script>\n'
     f'  <script type="module">{boot}</script>'),
    ("<title>tinyviz</title>", f"<title>{html.escape(source_name)} - tinyviz export</title>"),
    ('<div id="banner" class="banner" hidden></div>',
     f'<div id="export-note" class="banner">{html.escape(note(data, source_name))}</div>\n'
     '  <div id="banner" class="banner" hidden></div>'),
  ]
  for old, new in swaps:
    if old not in page:
      raise ExportError(f"templates/index.html: {old!r} not found")
    page = page.replace(old, new, 1)
  page = re.sub(r'\s*<link rel="modulepreload" href="[^"]*">', "", page)  # the modules are inline
  left = re.search(r'\b(?:src|href)="(?!data:)[^"]*"', page)
  if left:
    raise ExportError(f"templates/index.html loads {left.group()}: the export would not be self-contained")
  before, after = page.split(_MARK)
  return before, after


def render(data: dict, source_name: str) -> str:
  """The HTML page for collected data (held whole: the export writes its packed data as it is encoded, write)."""
  before, after = _shell(data, source_name)
  got = _digits(json.dumps(pack_data(data), separators=(",", ":")))
  return before + got["data"] + '","n":' + str(got["n"]) + "}}" + after


def write(out: str | Path, packed: dict, source_name: str) -> int:
  """Write the page of collect_packed's data to out, its JSON deflated and in digits piece by piece (no text of the
  whole data is ever held); returns the page's bytes."""
  before, after = _shell(packed, source_name)
  with open(out, "wb") as fh:
    fh.write(before.encode("utf-8"))
    n = _write_digits(fh, _json_pieces(packed))
    fh.write(('","n":' + str(n) + "}}" + after).encode("utf-8"))
    return fh.tell()


def _json_pieces(obj: Any) -> Iterator[str]:
  """obj as json.dumps writes it (compact, ASCII), in pieces: a dict's values one by one, a long list PIECE_ITEMS items
  at a time, so no piece is a whole column's text (a training step's columns were up to ~200 MB of text at once, the
  export's peak memory: issue 30's 1 GB)."""
  if isinstance(obj, dict):
    yield "{"
    for i, (k, v) in enumerate(obj.items()):
      yield ("," if i else "") + json.dumps(k if isinstance(k, str) else json.dumps(k)) + ":"
      yield from _json_pieces(v)
    yield "}"
  elif isinstance(obj, list) and len(obj) > PIECE_ITEMS:
    yield "["
    for i in range(0, len(obj), PIECE_ITEMS):  # (a list's text is its items' joined by commas: cut between two)
      yield ("," if i else "") + _COMPACT(obj[i:i + PIECE_ITEMS])[1:-1]
    yield "]"
  else:
    yield _COMPACT(obj)


def _write_digits(fh: IO[bytes], pieces: Iterable[str]) -> int:
  """The pieces' UTF-8 deflated and written as _digits writes the whole (base 85 works 4 bytes at a time, so whole
  groups can go as they come); returns the deflated bytes' count."""
  comp = zlib.compressobj(DEFLATE_LEVEL)
  held, n = b"", 0
  for text in itertools.chain(_batched(pieces), [None]):
    raw = comp.compress(text.encode("utf-8")) if text is not None else comp.flush()
    n += len(raw)
    held += raw
    cut = len(held) if text is None else len(held) - len(held) % 4
    if cut:
      fh.write(b85(held[:cut]))
      held = held[cut:]
  return n


def _batched(pieces: Iterable[str]) -> Iterator[str]:
  """The pieces joined into texts of about DEFLATE_TEXT characters: zlib's output does not depend on how its input is
  cut, and a call (and an encode) per piece cost (a training step's 7-kernel slice has 106k pieces, ~106 characters
  each: its write 1.59 -> 1.37 s of CPU with this and one encoder for every piece, _COMPACT)."""
  batch: list[str] = []
  size = 0
  for text in pieces:
    batch.append(text)
    size += len(text)
    if size >= DEFLATE_TEXT:
      yield "".join(batch)
      batch, size = [], 0
  if batch:
    yield "".join(batch)


def _digits(text: str) -> dict:
  """UTF-8 text deflated and written in base-85 digits (boot.js inflates it)."""
  raw = zlib.compress(text.encode("utf-8"), DEFLATE_LEVEL)
  return {"n": len(raw), "data": b85(raw).decode("ascii")}


def b85(raw: bytes) -> bytes:
  """base64.b85encode(raw, pad=True) with _B85's swaps, on whole arrays: each 4 bytes (zeros padding the last) as a
  big-endian number, its 5 digits most significant first. base64's loop in Python over the words took ~0.05 s of
  the demo's serial write (0.44 MB deflated) and ~0.5 s of a training step's (4.2 MB), this 0.003 and 0.03 s
  (tests/viewer/test_export_pack.py holds the two equal)."""
  words = np.frombuffer(raw + bytes(-len(raw) % 4), dtype=">u4").astype(np.uint32)
  out = np.empty((len(words), 5), dtype=np.uint8)
  for i in range(4, -1, -1):
    words, digit = np.divmod(words, 85)
    out[:, i] = _DIGITS[digit]
  return out.tobytes()


def payload(data: dict, ui: str) -> dict:
  """The embedded block: the UI's module (its hash in the page's policy) and collect()'s data packed
  (pack.py), each deflated and in base-85 digits (the UI's 190 KB of script take 76 KB so)."""
  return {"format": 2, "encoding": "deflate+base85", "ui": _digits(ui),
          "data": _digits(json.dumps(pack_data(data), separators=(",", ":")))}


def note(data: dict, source_name: str) -> str:
  """The line the page shows above the views: what this file is and what was left out."""
  red = ", ".join(data["redacted"]) if data["redacted"] else "nothing"
  only = f"; only contexts {', '.join(data['contexts_only'])}" if data["contexts_only"] else ""
  return (f"Read-only export of {source_name} ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC); "
          f"redacted: {red}{only}")
