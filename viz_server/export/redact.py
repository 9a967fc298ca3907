"""Redaction of an export's data (`--redact paths,source,argv,host`): every string redacted by what it holds, not by
the field it is in; viz_server/perfetto.py redacts the timeline's export with the same Redactor."""
from __future__ import annotations

import hashlib
import hmac
import posixpath
import re
import secrets
from typing import Any, Iterable

from viz_server.export import ExportError

REDACTABLE = ("paths", "source", "argv", "host")

# Every string of the export is redacted by what it holds, not by the field it is in (an error's text, a rule's source,
# generated code, a traceback, argv, call sites...): an absolute or home-relative path anywhere in a text, and with
# `host` the user's name and the host's. A folder becomes an HMAC-SHA256 token under a random key drawn per export
# and never written, so equal folders share a token within one export but no guessed folder can be checked against it.
_TOKEN_HEX = 12
_TOKEN = re.compile(rf"<[0-9a-f]{{{_TOKEN_HEX}}}>")
_C = r"[^\s/\\'\"`<>|:;,()\[\]{}*?=&$!]"  # a character of a path's component (a path ends at a space, quote, `:`...)
# a URL (kept, unless it is a file:// one), or a path starting after a delimiter (not inside a relative path, not
# right after a token: redacting is idempotent); `~` or `~user` begins a home-relative one
_PATHS = re.compile(rf"(?P<url>[A-Za-z][\w+.-]*://[^\s'\"`<>]*)"
                    rf"|(?:^|(?<=[\s'\"`(\[{{=,;:|>]))(?<!{_TOKEN.pattern})(?P<path>(?:~[\w.-]*)?/+{_C}+(?:/+{_C}+)*/?)")
_FILE_NAME = re.compile(r"[^.].*\.[A-Za-z0-9]{1,8}")  # a basename kept after its folder's token
_HOMES = ("/home", "/Users", "/var/home", "/export/home", "/root")
_PROCESS_KEY = secrets.token_bytes(32)  # redact_path's, where no Redactor is at hand


def _home_user(path: str | None) -> str | None:
  """The user whose home folder path is in (`/home/NAME/...`), if it is in one."""
  parts = (path or "").split("/")
  return parts[2] if len(parts) > 2 and "/".join(parts[:2]) in _HOMES[:4] and parts[2] else None


class Redactor:
  """Applies the chosen redactions to API answers: fields by kind (meta, sources) and every string by what it holds
  (string); key: the HMAC key of folder tokens (a fresh random one by default: tokens differ between exports)."""

  def __init__(self, what: Iterable[str], meta: dict | None, key: bytes | None = None) -> None:
    self.what = set(what)
    bad = self.what - set(REDACTABLE)
    if bad:
      raise ExportError(f"cannot redact {', '.join(sorted(bad))}: choose from {', '.join(REDACTABLE)}")
    meta = meta or {}
    cwd = meta.get("cwd") if isinstance(meta.get("cwd"), str) else None
    self.cwd = cwd
    # paths below the program's working directory stay readable relative to it (compiler/rewrite.py), unless it is
    # too near the root for that to hide anything
    self._root = posixpath.normpath(cwd) if cwd and cwd.startswith("/") and posixpath.normpath(cwd).count("/") >= 2 \
      else None
    self._key = key if key is not None else secrets.token_bytes(32)
    self._cache: dict[str, str] = {}
    names: dict[str, str] = {}
    if "host" in self.what:
      host = meta.get("host") if isinstance(meta.get("host"), str) else ""
      for n in (host, host.split(".")[0]):
        names.setdefault(n, "<host>")
      for n in (meta.get("user"), _home_user(cwd)):
        if isinstance(n, str):
          names[n] = "<user>"
    names = {n: t for n, t in names.items() if len(n) >= 2}
    # a name of 4 characters or more wherever it is, a shorter one only as a word (longest first)
    self._names = re.compile("|".join(re.escape(n) if len(n) >= 4 else rf"(?<![A-Za-z0-9]){re.escape(n)}(?![A-Za-z0-9])"
                                      for n in sorted(names, key=len, reverse=True))) if names else None
    self._name_token = names

  def token(self, folder: str) -> str:
    digest = hmac.new(self._key, folder.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return f"<{digest[:_TOKEN_HEX]}>"

  def path(self, path: str) -> str:
    """A path relative to the working directory when inside it, else its folder's token and its file name (a name
    with an extension, not a home folder's name; anything else is all token)."""
    norm = posixpath.normpath(path) if path.startswith("/") else path.rstrip("/") or path
    if self._root and (norm == self._root or norm.startswith(self._root + "/")):
      return posixpath.relpath(norm, self._root)
    head, tail = posixpath.split(norm)
    if head and _FILE_NAME.fullmatch(tail) and head not in _HOMES:
      return f"{self.token(head)}/{tail}"
    return self.token(norm)

  def _path_match(self, m: re.Match) -> str:
    if m.group("url") is not None:
      url = m.group("url")
      if url[:7].lower() == "file://" and url[7:8] == "/":
        return url[:7] + self.path(url[7:])
      return url
    return self.path(m.group("path"))

  def string(self, s: str) -> str:
    """s with every path (`paths`) and the user's and host's names (`host`) in it replaced by tokens."""
    got = self._cache.get(s)
    if got is not None:
      return got
    out = s
    if "paths" in self.what and ("/" in out or "~" in out):
      out = _PATHS.sub(self._path_match, out)
    if self._names is not None and self._names.search(out):  # (not inside a folder's token)
      pieces = _TOKEN.split(out)
      toks = _TOKEN.findall(out)
      pieces = [self._names.sub(lambda m: self._name_token[m.group()], p) for p in pieces]
      out = "".join(p + (toks[i] if i < len(toks) else "") for i, p in enumerate(pieces))
    if len(s) <= 4096 and len(self._cache) < 1 << 17:
      self._cache[s] = out
    return out

  def answer(self, obj: Any) -> Any:
    """obj with every string in it, dict keys too, through string (a copy; a loop, not recursion: any depth)."""
    if not self.what & {"paths", "host"}:
      return obj
    if isinstance(obj, str):
      return self.string(obj)
    if not isinstance(obj, (list, tuple, dict)):
      return obj
    top: list[Any] = [None]
    todo: list[tuple[Any, Any, Any]] = [(obj, top, 0)]
    while todo:
      src, parent, at = todo.pop()
      out: Any
      if isinstance(src, dict):
        out = {}
        for k, v in src.items():
          k = self.string(k) if isinstance(k, str) else k
          out[k] = self.string(v) if isinstance(v, str) else v
          if isinstance(v, (list, tuple, dict)):
            todo.append((v, out, k))
      else:
        out = list(src)
        for i, v in enumerate(out):
          if isinstance(v, str):
            out[i] = self.string(v)
          elif isinstance(v, (list, tuple, dict)):
            todo.append((v, out, i))
      parent[at] = out
    return top[0]

  def data(self, data: dict) -> dict:
    """collect()'s data with every string redacted, but for the answers' own URLs."""
    return {k: ({u: self.answer(a) for u, a in v.items()} if k == "answers" else self.answer(v))
            for k, v in data.items()}

  def meta(self, meta: dict | None) -> dict | None:
    if meta is None:
      return None
    m = dict(meta)
    if "argv" in self.what:
      m["argv"] = []
    if "host" in self.what:
      for k in ("host", "pid", "user", "cwd"):
        m.pop(k, None)
    return m

  def entry(self, entry: dict) -> dict:
    """The trace's entry (/api/traces): its meta, and how the program ended (the traceback's source lines are the
    user's source; its paths and names go with every other string's)."""
    ex = entry.get("exit")
    if ex is not None and "source" in self.what:
      ex = {**ex, "traceback": [{**f, "text": None} for f in ex["traceback"]]}
    return {**entry, "meta": self.meta(entry["meta"]), "exit": ex}

  def pattern(self, pat: dict) -> dict:
    if "source" in self.what:
      return {**pat, "src": None, "html": ""}
    # markup could split a path or a name across its spans: the Step panel shows the redacted source as plain text
    return {**pat, "html": None} if self.what & {"paths", "host"} else pat

  def kernel(self, body: dict) -> dict:
    if "source" in self.what:
      return {**body, "sources": []}
    # the Source panel shows plain text where a source has no html: its markup would triple the export's size
    return {**body, "sources": [{**src, "html": None} for src in body["sources"]]}

  def kernels(self, ks: list[dict]) -> list[dict]:
    return [{**k, "sources": []} for k in ks] if "source" in self.what else ks


def redact_path(path: Any, cwd: str | None, key: bytes | None = None) -> Any:
  """A string's paths redacted as an export's are (Redactor.string), under key (else one key for this process)."""
  if not isinstance(path, str) or not path:
    return path
  return Redactor(("paths",), {"cwd": cwd}, _PROCESS_KEY if key is None else key).string(path)
