"""`export --redact` redacts every string by kind (issue 31): a private path, the user's name or the host anywhere in
any text of the trace (an error, a rule's source, generated code, the exit's traceback, call sites, argv, cwd) is gone
from the page and from its data, and a folder's token is an HMAC under a per-export random key, so it cannot be
checked against a guessed folder."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from support import hostile_traces as ht
from support.export_helpers import embedded

from viz_server.export.collect import collect
from viz_server.export.command import export
from viz_server.offline import OfflineApi

ROOT = Path(__file__).resolve().parents[2]

ALL = ("paths", "source", "argv", "host")
TOKEN = re.compile(r"<([0-9a-f]{8,})>/([\w.]+)")


@pytest.fixture(scope="module")
def private(tmp_path_factory) -> Path:
  return ht.private_strings(tmp_path_factory.mktemp("red") / "run.vztrace")


def collected(path: Path, redact: tuple[str, ...]) -> str:
  """collect()'s data (the JSON answers the page embeds) as one text."""
  with OfflineApi(path) as api:
    return json.dumps(collect(api, redact=redact), ensure_ascii=False)


def exported(path: Path, out: Path, redact: tuple[str, ...]) -> tuple[str, str]:
  """The exported page, but for its embedded data, and that data decoded, as texts."""
  export(path, out, redact=redact)
  page = out.read_text(encoding="utf-8")
  # (the page without its deflated block, whose base-85 digits could spell anything, and the block decoded)
  return re.sub(r'(id="tinyviz-export">).*?(</script>)', r"\1\2", page, flags=re.S), \
    json.dumps(embedded(page), ensure_ascii=False)


def tokens(text: str) -> dict[str, set[str]]:
  """file name -> the folder tokens it appears under."""
  got: dict[str, set[str]] = {}
  for tok, name in TOKEN.findall(text):
    got.setdefault(name, set()).add(tok)
  return got


def test_the_private_strings_are_in_every_kind_of_field(private):
  """(The trace holds what the redaction must remove: the other tests are not vacuous.)"""
  text = collected(private, ())
  for where in ('"errors": ["RuntimeError at /home/zqxuser', "OSError: /srv/zqxdata", '"reason": "cache ~/zqxnotes',
                "compile failed in /opt/zqxvenv", "'/srv/zqxdata/set/x.npy' (on zqxhost.example.org, user zqxuser)",
                '"file": "/opt/zqxvenv/lib/site.py"', "source_filename = \\\"/opt/zqxvenv", "file:///srv/zqxdata",
                '"argv": ["/home/zqxuser', '"cwd": "/home/zqxuser/zqxproj"', "open('~/zqxnotes/a.txt')"):
    assert where in text


def test_all_kinds_leave_nothing_private(private, tmp_path):
  page, data = exported(private, tmp_path / "all.html", ALL)
  for text in (page, data, collected(private, ALL)):
    assert "zqx" not in text and "/home/" not in text and "/srv/" not in text and "/opt/" not in text
  assert "<title>run.vztrace - tinyviz export</title>" in page  # (the page around the block is searched)
  # what the viewer needs stays: files inside the program's working directory by their names, others' basenames
  assert '"file": "train.py"' in data and "at train.py:7 in main" in data and "/rules.py" in data
  assert "<host>" in data and "<user>" in data


@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_paths_alone_redact_paths_inside_every_text(private, tmp_path, monkeypatch, backend):
  """`paths` alone: no folder of a path anywhere (messages, tracebacks, generated code and rule sources included,
  which are kept); the host, not asked for, stays. (The export does not run kernels: BACKEND must not matter.)"""
  monkeypatch.setenv("BACKEND", backend)
  page, data = exported(private, tmp_path / "paths.html", ("paths",))
  for text in (page, data, collected(private, ("paths",))):
    assert not re.search(r"[/~]zqx|zqx\w*/", text)  # (the user's name and the host are not paths: they stay)
  assert "zqxhost.example.org" in data
  assert "source_filename = \\\"<" in data and "cache <" in data and "file://<" in data
  assert '"cwd": "."' in data and "model.py:3 reading <" in data


def test_tokens_are_stable_within_an_export_and_salted_between_exports(private, tmp_path):
  one = tokens(exported(private, tmp_path / "a.html", ("paths",))[1])
  two = tokens(exported(private, tmp_path / "b.html", ("paths",))[1])
  # one folder, one token: the rules' file, the call site, the exit's frame and the beam error all under lib
  lib = {name: toks for name, toks in one.items() if name in ("rules.py", "site.py", "io.py", "cc.py", "k.py")}
  assert len(lib) == 5 and all(len(t) == 1 for t in lib.values()) and len(set.union(*lib.values())) == 1
  assert one["x.npy"] == one["cfg.json"] != one["rules.py"]  # (data's folder, another token)
  assert one["rules.py"].isdisjoint(two["rules.py"]) and one["x.npy"].isdisjoint(two["x.npy"])


def test_a_dictionary_of_folders_maps_no_token_back(private, tmp_path):
  """The old token was sha256(folder)[:8]: a word list of folders gave each back. Now no guess, the right one
  included, hashes (at any length, with or without a trailing slash) to a token of the export."""
  got = tokens(exported(private, tmp_path / "d.html", ALL)[1])
  toks = set().union(*got.values())
  assert toks
  words = [f"/{a}/{b}{c}" for a in ("opt", "srv", "home", "usr") for b in ("zqxvenv", "zqxdata", "zqxuser", "lib")
           for c in ("", "/lib", "/set", "/zqxproj")] + ["~/zqxnotes", ht.PRIVATE["lib"], ht.PRIVATE["data"]]
  for w in words:
    for guess in (w, w + "/"):
      digest = hashlib.sha256(guess.encode()).hexdigest()
      assert not any(digest.startswith(t) for t in toks), guess
