"""/api/boot?pack=1: the contexts packed (each rewrite entry a row, names and files interned), what the page asks for
its first view (issue 30: 2,430 rewrite entries were 430 KB of a GPT step's 509 KB boot answer)."""
from __future__ import annotations

import json

from support import tracegen

from viz_server.api import _packed_contexts
from viz_server.app import create_app


def unpack(p):
  """static/api.js unpackContexts, in Python."""
  if isinstance(p, list):
    return p
  at = [k in p["interned"] for k in p["keys"]]
  entry = lambda row: {k: p["values"][v] if i else v for k, v, i in zip(p["keys"], row, at)}  # noqa: E731
  return [{**c, "rewrites": [entry(r) for r in c["rewrites"]]} for c in p["contexts"]]


def test_packed_contexts_are_the_contexts_answer_in_fewer_bytes(tmp_path):
  c = create_app([tracegen.write_demo(tmp_path / "demo.vztrace"), tracegen.write_evil(tmp_path / "evil.vztrace")],
                 follow=False).test_client()
  for t in (0, 1):
    plain = c.get(f"/api/boot?t={t}&compact=1")
    packed = c.get(f"/api/boot?t={t}&compact=1&pack=1")
    b, p = plain.get_json(), packed.get_json()
    assert isinstance(p["contexts"], dict) and p["contexts"]["interned"] == ["name", "file"]
    # the same entries, keys in the same order, as /contexts answers them; every other part of the answer alike
    want = c.get(f"/api/traces/{t}/contexts").get_json()
    assert json.dumps(unpack(p["contexts"])) == json.dumps(want) == json.dumps(b["contexts"])
    assert {**p, "contexts": None} == {**b, "contexts": None}
    assert len(packed.data) < len(plain.data)


def test_rewrites_of_other_keys_or_values_go_unpacked():
  rw = {"id": 1, "name": "a", "file": "f.py", "line": 3}
  ctx = {"id": 0, "name": "k", "rewrites": [rw]}
  packed = _packed_contexts([ctx, {**ctx, "id": 1, "rewrites": [{**rw, "name": "b"}, {**rw, "line": True}]}])
  assert packed["values"] == ["a", "f.py", "b"] and packed["contexts"][1]["rewrites"] == [[1, 2, 1, 3], [1, 0, 1, True]]
  # a name that is not a string (a hand-made trace) or rewrites of different keys: the entries as they are
  odd = [ctx, {**ctx, "rewrites": [{**rw, "name": 1}]}]
  assert _packed_contexts(odd) is odd
  odd = [ctx, {**ctx, "rewrites": [{"id": 2, "name": "a"}]}]
  assert _packed_contexts(odd) is odd
  assert _packed_contexts([]) == {"keys": [], "interned": [], "values": [], "contexts": []}
