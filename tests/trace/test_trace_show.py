"""The terminal viewer (`python -m viz_server.tools show`, also `python -m compiler.trace show`), checked against the
viewer's API on a real recorded trace, and against hostile strings."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import hostile_traces as ht
from support.trace_tools_helpers import record_small, run_show

from viz_server.offline import OfflineApi
from viz_server.term import SGR

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_trace(trace):
  return record_small(trace)

# escape sequences a hostile trace might try to send: a title change (OSC), clear screen (CSI), a C1 CSI, a hyperlink,
# a bidi override
EVIL = "\x1b]0;owned\x07\x1b[2J\x9b31m\x1b]8;;http://x\x1b\\link\u202e"


class Tty(io.StringIO):
  def isatty(self) -> bool:
    return True




def json_lines(text: str) -> list[dict]:
  return [json.loads(line) for line in text.splitlines()]


def test_list_matches_the_api(small_trace):
  with OfflineApi(small_trace) as api:
    contexts = api.trace_get("contexts")
  got = json_lines(run_show(small_trace, json=True))
  want = []
  for c in contexts:
    want.append(("context", c["id"], c["name"], len(c["rewrites"])))
    want += [("rewrite", rw["id"], rw["name"], rw["matches"]) for rw in c["rewrites"]]
  assert [(o["type"], o["id"], o["name"], o["rewrites"] if o["type"] == "context" else o["matches"])
          for o in got] == want
  text = run_show(small_trace)
  assert "\x1b" not in text  # not a terminal: no colors
  for c in contexts:
    for rw in c["rewrites"]:
      assert f"rw {rw['id']:<5} {rw['matches']:>6} matches  {rw['name']}" in text


def test_rewrite_matches_the_api(small_trace):
  with OfflineApi(small_trace) as api:
    rws = [rw for c in api.trace_get("contexts") for rw in c["rewrites"]]
    rw = max(rws, key=lambda r: r["matches"])
    detail = api.trace_get(f"rewrites/{rw['id']}")
    pats = {st["pattern"]: api.trace_get(f"patterns/{st['pattern']}") for st in detail["steps"]}
    diffs = [api.get(f"/api/diff?a={api.t}:{rw['id']}:{k - 1}&b={api.t}:{rw['id']}:{k}")
             for k in range(1, rw["matches"] + 1)]
  assert rw["matches"] >= 1
  got = json_lines(run_show(small_trace, json=True, rewrite=str(rw["id"])))
  assert got[0]["type"] == "rewrite" and got[0]["matches"] == rw["matches"]
  matches = got[1:]
  assert [m["step"] for m in matches] == list(range(1, rw["matches"] + 1))
  for m, st, d in zip(matches, detail["steps"], diffs):
    pat = pats[st["pattern"]]
    assert (m["before"], m["after"]) == (st["before"], st["after"])
    assert m["rule"] == {k: pat[k] for k in ("file", "line", "name", "src", "pat")}
    assert m["diff"] == d["lines"] and any(line["kind"] == "+" for line in d["lines"])
  text = run_show(small_trace, rewrite=rw["name"])  # by name: the same rewrite (one of that name here)
  pat = pats[detail["steps"][0]["pattern"]]
  assert f"step 1/{rw['matches']}  {pat['name']}  {pat['file']}:{pat['line']}" in text
  assert "  | " + pat["src"].splitlines()[0] in text
  first_plus = next(line["text"] for line in diffs[0]["lines"] if line["kind"] == "+")
  assert "  +" + first_plus in text


def test_kernels_and_sources_match_the_api(small_trace):
  with OfflineApi(small_trace) as api:
    ks = api.trace_get("kernels")
    k = ks[0]
    body = api.trace_get(f"contexts/{k['ctx']}/kernel")
  got = json_lines(run_show(small_trace, json=True, kernels=True))
  assert [{key: v for key, v in o.items() if key != "type"} for o in got] == ks
  text = run_show(small_trace, kernels=True)
  run = k["run"]
  assert run is not None and f"{run['gflops']:.2f} GFLOP/s" in text and k["name"] in text
  assert " ".join(f"{o['op']}({o['axis']}, {o['arg']})" for o in k["opts"] if o["ok"]) in text
  colored = run_show(small_trace, out=Tty(), kernels=True)
  assert "\x1b[34m" in colored  # the first axis of the kernel's shape is blue (a global axis)
  src = next(s for s in body["sources"] if s["kind"] == "uops")
  text = run_show(small_trace, source="uops", kernel=k["name"])
  assert src["text"] in text
  got = json_lines(run_show(small_trace, json=True, source="asm"))
  assert [o["text"] for o in got] == [s["text"] for s in body["sources"] if s["kind"] == "asm"]


def test_colors_only_on_a_terminal_without_no_color(small_trace, monkeypatch):
  monkeypatch.delenv("NO_COLOR", raising=False)
  assert "\x1b[" in run_show(small_trace, out=Tty())
  monkeypatch.setenv("NO_COLOR", "1")
  assert "\x1b" not in run_show(small_trace, out=Tty())


def evil_trace(path: Path) -> Path:
  pattern = {**ht.PATTERN, "file": f"h{EVIL}.py", "src": f"def f(x):\n  return x  # {EVIL}", "name": f"f{EVIL}",
             "pat": f"UPat({EVIL})"}
  kernel = [{"t": "ctx_begin", "id": 1, "parent": 0, "name": f"k{EVIL}", "kind": "kernel", "ts": 1.7e9},
            {"t": "opt", "ctx": 1, "op": f"UPCAST{EVIL}", "axis": 0, "arg": 4, "ok": True, "reason": None,
             "shape": [4], "colors": [f"blue{EVIL}"], "kname": f"k{EVIL}"},
            {"t": "source", "ctx": 1, "kind": "asm", "text": f"ret # {EVIL}", "compile_s": 0.1},
            {"t": "run", "ctx": 1, "kname": f"k{EVIL}", "times": [1e-6], "min": 1e-6, "median": 1e-6, "flops": 1,
             "bytes": 1, "gflops": 1, "gbs": 1}]
  return ht.write(path, [[ht.meta(), ht.ctx(0, name=f"c{EVIL}"), ht.node(0, arg=EVIL), ht.node(1, "ADD", [0, 0]),
                          ht.node(2, arg=f"2{EVIL}"), pattern, {**ht.rw_begin(0, 1), "name": f"r{EVIL}"},
                          {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 2, "dt": 5},
                          ht.rw_end(0, 2, 1), *kernel, ht.END]])


@pytest.mark.parametrize("kw", [{}, {"rewrite": "0"}, {"kernels": True}, {"source": "asm"}],
                         ids=["list", "rewrite", "kernels", "source"])
@pytest.mark.parametrize("out", [io.StringIO, Tty], ids=["pipe", "tty"])
def test_hostile_strings_send_no_escape_sequence(tmp_path, monkeypatch, kw, out):
  monkeypatch.delenv("NO_COLOR", raising=False)
  path = evil_trace(tmp_path / "evil.vztrace")
  for as_json in (False, True):
    text = run_show(path, out=out(), json=as_json, **kw)
    assert "owned" in text or "ret #" in text  # the payload is shown...
    plain = text.replace("\x1b[0m", "")
    for code in SGR.values():  # ...and the only escapes are our own colors
      plain = plain.replace(f"\x1b[{code}m", "")
    assert not any(c in plain for c in ("\x1b", "\x07", "\x9b", "\u202e")), repr(text)
    assert "\\x1b]0;owned" in text or "\\u001b]0;owned" in text


def test_cli_entry_points(small_trace):
  for entry in (["-m", "compiler.trace"], ["-m", "viz_server.tools"]):
    p = subprocess.run([sys.executable, *entry, "show", str(small_trace), "--kernels"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "GFLOP/s" in p.stdout and "\x1b" not in p.stdout
  p = subprocess.run([sys.executable, "-m", "compiler.trace", "show", str(small_trace), "--rewrite", "nope"], cwd=ROOT,
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 1 and "no rewrite" in p.stderr
  bad = small_trace.parent / "bad.vztrace"
  bad.write_bytes(b"not a trace at all")
  p = subprocess.run([sys.executable, "-m", "compiler.trace", "show", str(bad)], cwd=ROOT, capture_output=True,
                     text=True, timeout=120)
  assert p.returncode == 2 and "not a readable trace" in p.stderr
