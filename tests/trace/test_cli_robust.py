"""Issue 31 (low): the terminal tools on hostile traces. Every terminal line goes through one escaping path (U+061C,
U+2028/2029 and lone surrogates too), `info` takes any `meta.started`, `export` any rewrite id, a closed pipe ends
every command quietly, `show --rewrite` prints a bounded amount, and /origin searches a bounded amount."""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import hostile_traces as H

from viz_server import api, show
from viz_server.app import create_app
from viz_server.offline import OfflineApi
from vztrace.term import safe, safe_block

ROOT = Path(__file__).resolve().parents[2]
LURE = "\x1b]52;c;aGk=\x07\u061c\u2028\u2029\u202e\x9b\ud800"  # clipboard write, bidi mark, separators, C1, surrogate


def run(*args: str, stdout: int | None = subprocess.PIPE, **kw) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env["PYTHONIOENCODING"] = "utf-8"  # (a terminal's encoding: strict, as a real one is)
  return subprocess.run([sys.executable, "-m", "compiler.trace", *args], cwd=ROOT, env=env, stdout=stdout,
                        stderr=subprocess.PIPE, timeout=300, **kw)


def lured(path: Path, started: object = 1.7e9) -> Path:
  """A trace whose every string the tools print holds LURE."""
  meta = {**H.meta(), "argv": [LURE], "host": LURE, "python": LURE, "cwd": LURE, "started": started}
  ctx = {**H.ctx(0, kind=LURE, name=LURE)}
  rw = {**H.rw_begin(0, 1), "name": LURE, "file": LURE}
  pat = {**H.PATTERN, "name": LURE, "src": LURE, "file": LURE, "pat": LURE}
  return H.write(path, [[meta, ctx, H.node(0, arg=LURE), H.node(1, "ADD", [0, 0]), H.node(2, arg="2"), pat, rw,
                         {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 2, "dt": 5}, H.rw_end(0, 2, 1),
                         H.END]])


def test_safe_escapes_the_marks_separators_and_surrogates():
  for s in (safe(LURE), safe_block(LURE)):
    assert not any(c in s for c in "\x1b\x07\u061c\u2028\u2029\u202e\x9b\ud800"), ascii(s)
    s.encode("utf-8")  # writable by any terminal encoding
  assert safe("\u061c\u2028\u2029\ud800") == "\\u061c\\u2028\\u2029\\ud800"


@pytest.mark.parametrize("command", [["info"], ["show"], ["show", "--rewrite", "0"], ["compare"]])
def test_hostile_strings_are_escaped_and_never_end_the_output(tmp_path, command):
  trace = lured(tmp_path / "t.vztrace")
  args = [*command, str(trace)] + ([str(H.small(tmp_path / "s.vztrace"))] if command == ["compare"] else [])
  p = run(*args)
  assert p.returncode in (0, 1) and b"Traceback" not in p.stderr, p.stderr.decode()[-800:]
  out = p.stdout.decode("utf-8")
  assert out.strip() and not any(c in out for c in "\x1b\x07\u061c\u2028\u2029\u202e\x9b"), ascii(out)


@pytest.mark.parametrize("started", [1e300, 2 ** 62, -1e300, 1e18])
def test_info_takes_any_started(tmp_path, started):
  p = run("info", str(lured(tmp_path / "t.vztrace", started)))
  assert p.returncode == 0 and b"Traceback" not in p.stderr, p.stderr.decode()[-800:]
  assert b"started ?" in p.stdout or str(started).encode() in p.stdout


@pytest.mark.parametrize("rid", [-1, -(2 ** 40)])
def test_export_takes_a_negative_rewrite_id(tmp_path, rid):
  trace = H.write(tmp_path / "neg.vztrace", [[H.meta(), H.ctx(0), H.node(0), H.node(1, "ADD", [0, 0]), H.PATTERN,
                                              H.rw_begin(rid, 1), {"t": "match", "rw": rid, "pat": 0, "before": 1,
                                                                   "after": 0, "dt": 5}, H.rw_end(rid, 0, 1), H.END]])
  out = tmp_path / "neg.html"
  p = run("export", str(trace), "-o", str(out))
  assert p.returncode == 0 and b"Traceback" not in p.stderr, p.stderr.decode()[-800:]
  assert out.stat().st_size > 0
  client = create_app([trace], follow=False, allowed_hosts=None, socketio_client=None).test_client()
  t = client.get("/api/traces").get_json()[0]["id"]
  assert client.get(f"/api/traces/{t}/export").status_code == 200


@pytest.mark.parametrize("command", [["info"], ["validate"], ["show"], ["show", "--json"], ["show", "--rewrite", "0"],
                                     ["compare"]])
def test_a_closed_pipe_ends_every_command_quietly(tmp_path, command):
  big = H.write(tmp_path / "big.vztrace", [[H.meta(), *[H.ctx(i, name=f"context {i}") for i in range(3000)],
                                            H.node(0), H.node(1, "ADD", [0, 0]), H.PATTERN, H.rw_begin(0, 1),
                                            *({"t": "match", "rw": 0, "pat": 0, "before": 1 - i % 2, "after": i % 2,
                                               "dt": 5} for i in range(2000)), H.rw_end(0, 1, 2000), H.END]])
  args = [*command, str(big)] + ([str(H.small(tmp_path / "s.vztrace"))] if command == ["compare"] else [])
  r, w = os.pipe()
  os.close(r)  # the reader (`| head`) has gone before the first line
  try:
    p = run(*args, stdout=w)
  finally:
    os.close(w)
  assert b"Traceback" not in p.stderr and b"BrokenPipe" not in p.stderr, p.stderr.decode()[-800:]


def test_origin_searches_a_bounded_number_of_nodes(tmp_path):
  n, rewrites = 20_000, 70  # each rewrite's input graph: a chain of n nodes; none of them made the node asked about
  strs = ["CONST", "dtypes.int", "1", "NEG"]
  b = H._batch(0, strs, [0] + [3] * (n - 1), [2] * n, [0] + [1] * (n - 1), list(range(n - 1)),
               recs=[H.meta(), H.ctx(0), H.PATTERN], at=[0, 0, 0, 0, 0, 0])
  rws = [[H.rw_begin(i, n - 1), {"t": "match", "rw": i, "pat": 0, "before": n - 1, "after": 0, "dt": 1},
          H.rw_end(i, 0, 1)] for i in range(rewrites)]
  trace = H.write(tmp_path / "o.vztrace", [[b], *rws, [H.END]])
  app = create_app([trace], follow=False, allowed_hosts=None, socketio_client=None)
  views, resolved = app.extensions["tinyviz"]["views"], []
  real = views.replay

  def counted(tr, rw):
    rp = real(tr, rw)
    resolved.append(rp.sizes[0])
    return rp
  views.replay = counted
  got = app.test_client().get(f"/api/traces/0/nodes/{n // 2}/origin?before={rewrites}").get_json()
  assert got["rewrite"] is None and got["cut"] is True and got["searched"] == len(resolved) < rewrites, got
  assert sum(resolved[:-1]) <= api.ORIGIN_NODES < sum(resolved), resolved  # stopped after the one past the bound


@pytest.mark.parametrize("as_json", [False, True])
def test_show_rewrite_is_bounded_and_says_where_it_cut(tmp_path, monkeypatch, as_json):
  n, m = 5000, 60  # a chain of n nodes whose root each match replaces by its source: each step's graphs ~n nodes
  strs = ["CONST", "dtypes.int", "1", "NEG"]
  b = H._batch(0, strs, [0] + [3] * (n - 1), [2] * n, [0] + [1] * (n - 1), list(range(n - 1)),
               recs=[H.meta(), H.ctx(0), H.PATTERN], at=[0, 0, 0, 0, 0, 0])
  ms = [{"t": "match", "rw": 0, "pat": 0, "before": n - 1 - i, "after": n - 2 - i, "dt": 1} for i in range(m)]
  trace = H.write(tmp_path / "s.vztrace", [[b], [H.rw_begin(0, n - 1), *ms, H.rw_end(0, n - 1 - m, m)], [H.END]])
  monkeypatch.setattr(show, "MAX_DIFF_NODES", 50_000)
  diffs = []
  real = OfflineApi.get
  monkeypatch.setattr(OfflineApi, "get", lambda self, url: (diffs.append(url) if url.startswith("/api/diff") else None,
                                                            real(self, url))[1])
  out = io.StringIO()
  args = argparse.Namespace(file=str(trace), rewrite="0", json=as_json, debug=None, source=None, kernels=False,
                            kernel=None)
  assert show.run(args, out) == 0
  done = 50_000 // (2 * (n - 10)) + 1  # steps diffed before the bound was passed
  assert len(diffs) <= done + 1 < m, len(diffs)
  text = out.getvalue()
  if as_json:
    cut = [json.loads(line) for line in text.splitlines() if '"type": "cut"' in line]
    assert cut and cut[0]["from_step"] == len(diffs) + 1 and cut[0]["steps"] == m, text[-500:]
  else:
    assert f"... cut: steps {len(diffs) + 1}-{m} of rewrite 0 not printed" in text, text[-500:]
