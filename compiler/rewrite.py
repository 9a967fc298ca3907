"""Pattern rewriting: `UPat`, `PatternMatcher` and `graph_rewrite` (every call and every match is traced)."""
from __future__ import annotations

import atexit
import inspect
import itertools
import os
import sys
import time
from time import perf_counter_ns
from typing import Any, Callable, Iterator

from compiler.dtype import DType
from compiler.trace import recorder
from compiler.uop import GroupOp, Ops, UOp, toposort

Captures = dict[str, Any]


class UPat:
  """A pattern over UOps. `src` as a tuple matches in order, as a list any permutation, as a UPat every source."""
  __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "src_kind", "custom")

  def __init__(self, op: Ops | tuple | set | None = None, dtype: DType | tuple | None = None,
               src: tuple | list | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False, custom: Callable[[UOp], bool] | None = None):
    self.op = None if op is None else (frozenset((op,)) if isinstance(op, Ops) else frozenset(op))
    # a frozenset: membership is a (cached) hash lookup plus an identity check, no per-element __eq__
    self.dtype = None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
    self.arg, self.name, self.allow_any_len, self.custom = arg, name, allow_any_len, custom
    # src_kind: 0 none, 1 ordered tuple, 2 permutations (list), 3 repeat one pattern for every source
    if src is None:
      self.src_kind, self.src = 0, None
    elif isinstance(src, UPat):
      self.src_kind, self.src = 3, src
    elif isinstance(src, list):
      self.src_kind, self.src = 2, tuple(src)
    else:
      self.src_kind, self.src = 1, tuple(src)

  # ---- constructors
  @staticmethod
  def var(name: str | None = None, dtype: DType | tuple | None = None) -> UPat:
    return UPat(dtype=dtype, name=name)

  @staticmethod
  def cvar(name: str | None = None, dtype: DType | tuple | None = None, vec: bool = False) -> UPat:
    c = UPat(Ops.CONST, dtype=dtype, name=name)
    return UPat((Ops.CONST, Ops.VECTORIZE), dtype, name=name, custom=_is_const_vec) if vec else c

  @staticmethod
  def const(dtype: DType | tuple | None, value: Any) -> UPat:
    return UPat(Ops.CONST, dtype=dtype, arg=value)

  @staticmethod
  def any(*pats: UPat) -> UPatAny:
    return UPatAny(pats)

  # ---- chainable helpers
  def named(self, name: str) -> UPat:
    p = self._copy()
    p.name = name
    return p

  def _copy(self) -> UPat:
    p = UPat.__new__(type(self))
    for cls in type(self).__mro__:  # subclasses (UPatAny) add slots of their own
      for k in getattr(cls, "__slots__", ()):
        if k != "__weakref__":
          object.__setattr__(p, k, getattr(self, k))
    return p

  def alu(self, op: Ops, *src: UPat | Any) -> UPat:
    srcs = (self, *(s if isinstance(s, UPat) else UPat.const(None, s) for s in src))
    return UPat(op, src=list(srcs) if op in GroupOp.Commutative else srcs)

  def __add__(self, x): return self.alu(Ops.ADD, x)
  def __radd__(self, x): return self.alu(Ops.ADD, x)
  def __mul__(self, x): return self.alu(Ops.MUL, x)
  def __rmul__(self, x): return self.alu(Ops.MUL, x)
  def __sub__(self, x): return self.alu(Ops.SUB, x)
  def __floordiv__(self, x): return self.alu(Ops.IDIV, x)
  def __mod__(self, x): return self.alu(Ops.MOD, x)
  def __truediv__(self, x): return self.alu(Ops.FDIV, x)
  def __neg__(self): return self.alu(Ops.NEG)
  def __lt__(self, x): return self.alu(Ops.CMPLT, x)
  def __and__(self, x): return self.alu(Ops.AND, x)
  def __or__(self, x): return self.alu(Ops.OR, x)
  def __xor__(self, x): return self.alu(Ops.XOR, x)
  def eq(self, x): return self.alu(Ops.CMPEQ, x)
  def ne(self, x): return self.alu(Ops.CMPNE, x)
  def maximum(self, x): return self.alu(Ops.MAX, x)
  def where(self, x, y): return self.alu(Ops.WHERE, x, y)
  def cast(self, dtype: DType | None = None, name: str | None = None) -> UPat:
    return UPat(Ops.CAST, dtype, (self,), name=name)
  def load(self, name: str | None = None, **kw) -> UPat:
    return UPat(Ops.LOAD, src=(self,), name=name, allow_any_len=True, **kw)
  def index(self, idx: UPat, name: str | None = None) -> UPat:
    return UPat(Ops.INDEX, src=(self, idx), name=name, allow_any_len=True)
  def reduce(self, name: str | None = None, arg: Any = None) -> UPat:
    return UPat(Ops.REDUCE, src=(self,), name=name, arg=arg, allow_any_len=True)

  __hash__ = object.__hash__

  def __eq__(self, other):
    return self is other

  # ---- matching
  def match(self, u: UOp, store: Captures) -> Iterator[Captures]:
    """Yield every capture dict under which `u` matches (more than one when permutations match)."""
    if self.op is not None and u.op not in self.op:
      return
    if self.dtype is not None and u.dtype not in self.dtype and u.dtype.scalar() not in self.dtype:
      return
    if self.arg is not None and u.arg != self.arg:
      return
    if self.custom is not None and not self.custom(u):
      return
    if self.name is not None:
      prev = store.get(self.name)
      if prev is not None and prev is not u:
        return
      store = {**store, self.name: u}
    kind = self.src_kind
    if kind == 0:
      yield store
      return
    if kind == 3:
      yield from _match_all(self.src, u.src, store)
      return
    pats = self.src
    n = len(pats)
    if (len(u.src) < n) if self.allow_any_len else (len(u.src) != n):
      return
    if kind == 1:
      yield from _match_seq(pats, u.src[:n], store)
      return
    if n == 2:  # (commutative ALUs): permutations(range(2)) without its machinery; no swap of a node with itself
      a, b = u.src[0], u.src[1]
      yield from _match_seq(pats, (a, b), store)
      if a is not b:
        yield from _match_seq(pats, (b, a), store)
      return
    seen: set[tuple] = set()
    for perm in itertools.permutations(range(n)):
      srcs = tuple(u.src[i] for i in perm)
      if srcs in seen:
        continue
      seen.add(srcs)
      yield from _match_seq(pats, srcs, store)

  def __repr__(self) -> str:
    parts = []
    if self.op is not None:
      ops = sorted(self.op, key=lambda o: o.value)
      parts.append(repr(ops[0]) if len(ops) == 1 else "(" + ", ".join(map(repr, ops)) + ")")
    if self.dtype is not None:
      dts = sorted(self.dtype)
      parts.append("dtype=" + (repr(dts[0]) if len(dts) == 1 else "(" + ", ".join(map(repr, dts)) + ")"))
    if self.src is not None:
      if self.src_kind == 3:
        parts.append(f"src={self.src!r}")
      else:
        inner = ", ".join(map(repr, self.src))
        parts.append(f"src=[{inner}]" if self.src_kind == 2 else f"src=({inner}{',' if len(self.src) == 1 else ''})")
    if self.arg is not None:
      parts.append(f"arg={self.arg!r}")
    if self.name is not None:
      parts.append(f"name={self.name!r}")
    if self.allow_any_len:
      parts.append("allow_any_len=True")
    return f"UPat({', '.join(parts)})"


class UPatAny(UPat):
  """Matches if any of its patterns matches."""
  __slots__ = ("pats",)

  def __init__(self, pats: tuple[UPat, ...]):
    super().__init__()
    self.pats = pats
    ops = [p.op for p in pats]
    self.op = None if any(o is None for o in ops) else frozenset().union(*ops)

  def match(self, u: UOp, store: Captures) -> Iterator[Captures]:
    for p in self.pats:
      for st in p.match(u, store):
        if self.name is None:
          yield st
        elif st.get(self.name) is None or st[self.name] is u:
          yield {**st, self.name: u}

  def __repr__(self) -> str:
    return "UPat.any(" + ", ".join(map(repr, self.pats)) + ")"


def _is_const_vec(u: UOp) -> bool:
  return u.op is Ops.CONST or all(s.op is Ops.CONST and s.arg == u.src[0].arg for s in u.src)


def _match_seq(pats: tuple[UPat, ...], srcs: tuple[UOp, ...], store: Captures) -> Iterator[Captures]:
  """Every capture under which pats[i] matches srcs[i] for all i (backtracking with a stack: wide nodes don't
  recurse)."""
  n = len(srcs)
  if n == 0:
    yield store
    return
  for p, s in zip(pats, srcs):  # a source of the wrong op fails every assignment: say so before any generator
    if p.op is not None and s.op not in p.op:
      return
  stack = [pats[0].match(srcs[0], store)]
  while stack:
    st = next(stack[-1], None)
    if st is None:
      stack.pop()
    elif len(stack) == n:
      yield st
    else:
      stack.append(pats[len(stack)].match(srcs[len(stack)], st))


def _match_all(pat: UPat, srcs: tuple[UOp, ...], store: Captures) -> Iterator[Captures]:
  return _match_seq((pat,) * len(srcs), srcs, store)


# the functions of the rules marked optional (PatternMatcher(..., optional=True)): a matcher built from their entries
# (`Rule.entry`) keeps the mark (`+` and `named` carry each rule's own mark)
_OPTIONAL_FNS: set = set()


class Rule:
  """One (UPat, function) pair, with what the trace needs to show it: its name, file:line and source. `optional`: the
  program stays valid when a match of it is skipped (a simplification, a fold, index math; not a required lowering),
  so SKIP_MATCHES numbers its matches and may skip them."""
  __slots__ = ("pat", "fn", "takes_ctx", "index", "given_name", "matcher", "_name", "optional", "node_cap",
               "node_test")

  def __init__(self, pat: UPat, fn: Callable, index: int, name: str | None = None, matcher: str | None = None,
               optional: bool = False):
    self.pat, self.fn, self.index, self.given_name, self.matcher, self._name = pat, fn, index, name, matcher, None
    self.optional = optional or fn in _OPTIONAL_FNS
    try:
      params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
      params = {}
    self.takes_ctx = "ctx" in params
    # a pattern of an op and dtype alone (most rules: "ALU u", "SINK sink") matches every node PatternMatcher.rules_for
    # gives its rule, once: graph_rewrite's untraced path calls it without matching. Its capture name ("" for none),
    # None for any other pattern. node_test: such a pattern's test of the node (`custom`), asked directly: the
    # expander's rules test every node it walks (GPT step's 94k) for UNROLL sources, and a match's generator cost
    # more than the test
    simple = type(pat) is UPat and pat.src_kind == 0 and pat.arg is None
    self.node_cap = (pat.name or "") if simple else None
    self.node_test = pat.custom if simple else None

  @property
  def location(self) -> tuple[str, int]:
    code = getattr(self.fn, "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else ("<unknown>", 0)

  @property
  def source(self) -> str:
    try:
      return inspect.getsource(self.fn).strip()
    except (OSError, TypeError):
      return f"# source not available\n{self.pat!r}"

  @property
  def fn_name(self) -> str:
    return getattr(self.fn, "__name__", type(self.fn).__name__)

  @property
  def name(self) -> str:
    """What the viewer, `show` and errors call the rule: the name written with it, else its function's name, else
    its matcher's name and its pattern (e.g. "symbolic: ADD(x, 0)"), since `<lambda>` says nothing."""
    if self._name is None:
      fn_name = getattr(self.fn, "__name__", None)  # (a partial or a callable object has none)
      if self.given_name:
        self._name = self.given_name
      elif fn_name and fn_name != "<lambda>":
        self._name = fn_name
      else:
        self._name = f"{self.matcher}: {pattern_text(self.pat)}" if self.matcher else pattern_text(self.pat)
    return self._name

  @property
  def entry(self) -> tuple[UPat, Callable, str]:
    """The rule as a PatternMatcher entry that keeps its name (to build a matcher of other matchers' rules)."""
    return (self.pat, self.fn, self.name)


def _ops_text(ops: frozenset | None) -> str:
  return "|".join(o.name for o in sorted(ops, key=lambda o: o.value)) if ops is not None else "_"


def pattern_text(pat: UPat, depth: int = 2) -> str:
  """A short spelling of a pattern for a rule's name: its ops, and its sources' to `depth` levels (a captured node
  of any op is its capture name, a constant its value), e.g. "ADD(x, 0)"."""
  if isinstance(pat, UPatAny):
    return " | ".join(pattern_text(p, depth) for p in pat.pats)
  if pat.op is None:
    return pat.name or "_"
  if pat.op == {Ops.CONST} and pat.arg is not None:
    return repr(pat.arg)
  head = _ops_text(pat.op)
  if pat.src is None or depth <= 0:
    return head
  if pat.src_kind == 3:
    return f"{head}({pattern_text(pat.src, depth - 1)}, ...)"
  inner = ", ".join(pattern_text(p, depth - 1) for p in pat.src)
  return f"{head}({inner}{', ...' if pat.allow_any_len else ''})"


def _rule(entry: tuple, i: int, matcher: str | None, optional: bool = False) -> Rule:
  """A matcher's entry (pattern, function[, name]) as a Rule; a malformed one says which entry of which matcher."""
  where = f"PatternMatcher {matcher!r} rule {i}"
  if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3):
    size = f" of {len(entry)}" if isinstance(entry, (tuple, list)) else ""
    raise TypeError(f"{where}: expected (UPat, function) or (UPat, function, name), got {type(entry).__name__}{size}")
  name = entry[2] if len(entry) == 3 else None
  if name is not None and (not isinstance(name, str) or not name):
    raise TypeError(f"{where}: a rule's name is a non-empty str, got {name!r}")
  return Rule(entry[0], entry[1], i, name, matcher, optional)


def _renamed(rules: list[Rule], matcher: str | None) -> list[Rule]:
  """rules as rules of the matcher called matcher, each keeping its own name and its optional mark."""
  return [Rule(r.pat, r.fn, i, r.name, matcher, r.optional) for i, r in enumerate(rules)]


def _admits_dtype(pat: UPat, dtype: DType) -> bool:
  """False only where pat surely fails on a node of this dtype (UPat.match's first check of the node's dtype)."""
  return pat.dtype is None or dtype in pat.dtype or dtype.scalar() in pat.dtype


def _admits_src0(pat: UPat, src0_op: Ops | None) -> bool:
  """False only where pat surely fails on a node whose first source has op src0_op (None: a node with no sources)."""
  if pat.src_kind == 3:  # one pattern for every source, the first's too (constant folding's "ALU of CONSTs": the
    # expander's lanes, whose first source is their row's index, were matched one by one); no sources match it
    return src0_op is None or pat.src.op is None or src0_op in pat.src.op
  if pat.src_kind != 1 or not pat.src:  # a permutation or no sources: no first source to check
    return True
  if src0_op is None:  # an ordered pattern of n >= 1 sources needs at least n
    return False
  first = pat.src[0].op  # UPat.any's op is the union of its alternatives' (None when one takes any op)
  return first is None or src0_op in first


class PatternMatcher:
  """Rules indexed by op, tried in order; compose matchers with `+` ("a + b"), rename a combination with `named`."""

  def __init__(self, rules: list[tuple[UPat, Callable] | tuple[UPat, Callable, str]], name: str | None = None,
               optional: bool = False):
    """rules: (pattern, function) pairs, or (pattern, function, name) where the function's name would not say what
    the rule does (a lambda; one function behind several rules). optional: skipping any match of these rules keeps
    the program valid (Rule.optional; matchers built from their entries keep the mark)."""
    self.name = name
    self.rules = [r if isinstance(r, Rule) else _rule(r, i, name, optional) for i, r in enumerate(rules)]
    if optional:
      _OPTIONAL_FNS.update(r.fn for r in self.rules)
    self.pdict: dict[Ops, list[Rule]] = {}
    self.wildcard: list[Rule] = []
    for r in self.rules:
      if r.pat.op is None:
        self.wildcard.append(r)
      for op in (r.pat.op or ()):
        self.pdict.setdefault(op, []).append(r)
    if self.wildcard:  # keep rule order: wildcard rules interleave with the op-indexed ones
      for op in list(self.pdict):
        self.pdict[op] = sorted(set(self.pdict[op]) | set(self.wildcard), key=self.rules.index)
    # (op, dtype, first source's op) -> the rules of pdict that can match such a node, in order: a matcher whose rules
    # share their root op (the "gradient" markers) is otherwise tried rule by rule on every node, and an int-only pass
    # (index fold) on every float node
    self._by_src0: dict[tuple, tuple[Rule, ...]] = {}
    # a matcher with no rule on a dtype keys None for it (a DType's hash is Python code)
    self._by_dtype = any(r.pat.dtype is not None for r in self.rules)

  def rules_for(self, u: UOp) -> tuple[Rule, ...]:
    """The rules that may match u, in order: those of u's op whose pattern admits u's dtype and first source's op."""
    key = (u.op, u.dtype if self._by_dtype else None, u.src[0].op if u.src else None)
    got = self._by_src0.get(key)
    if got is None:
      got = self._by_src0[key] = tuple(r for r in self.pdict.get(u.op, self.wildcard)
                                       if _admits_dtype(r.pat, u.dtype) and _admits_src0(r.pat, key[2]))
    return got

  def __add__(self, other: PatternMatcher) -> PatternMatcher:
    """self's rules, then other's, as one matcher named "self + other" (each rule keeps its name and its mark)."""
    name = " + ".join(n for n in (self.name, other.name) if n) or None
    return PatternMatcher(_renamed(self.rules + other.rules, name), name=name)

  def named(self, name: str) -> PatternMatcher:
    """The same rules as a matcher called name: a combination the passes know by its own name (`symbolic`)."""
    return PatternMatcher(_renamed(self.rules, name), name=name)

  def __repr__(self) -> str:
    return f"PatternMatcher({self.name or ''}, {len(self.rules)} rules)"

  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    """The first rule's result for u, or None when no rule matches."""
    for rule in self.rules_for(u):
      for caps in rule.pat.match(u, {}):
        ret = rule.fn(ctx=ctx, **caps) if rule.takes_ctx else rule.fn(**caps)
        if ret is not None and ret is not u:
          return ret
    return None


# ---- switches: rules and opts turned off (docs/architecture.md, "Switches")

def parse_ranges(text: str, var: str = "SKIP_MATCHES") -> tuple[tuple[int, float], ...]:
  """SKIP_MATCHES's ranges of match numbers: "5", "3-7" (both included), "3-" (to the end), comma-separated."""
  out = []
  for part in filter(None, (p.strip() for p in text.split(","))):
    lo, dash, hi = part.partition("-")
    try:
      a = int(lo)
      b = float("inf") if dash and not hi.strip() else int(hi) if dash else a
    except ValueError:
      raise ValueError(f"{var}: {part!r} is not a number, a range a-b or an open range a-") from None
    if a < 0 or b < a:
      raise ValueError(f"{var}: {part!r} is not a range of match numbers (0 <= a <= b)")
    out.append((a, b))
  return tuple(out)


def _names(text: str) -> frozenset[str]:
  return frozenset(filter(None, (n.strip() for n in text.split(","))))


class Switches:
  """What a run turns off: rules by name (SKIP_RULES="name1,name2"), kernel opts (SKIP_OPTS=1 all of them, or
  "kernel name, opt name" items such as "r_16_16,UPCAST"), and optional transformations by number (SKIP_MATCHES="a-b":
  the run's optional transformations, every match of an optional rule and every applied kernel opt, are numbered
  0, 1, ... in the order they happen, which is deterministic). SKIP_REPORT=FILE writes, when the process exits, how
  many were numbered and, for SKIP_DESCRIBE=k, what the k-th was (`python -m compiler.trace bisect` reads it)."""

  def __init__(self, rules: frozenset[str] = frozenset(), ranges: tuple = (), opts: frozenset[str] = frozenset(),
               describe: int | None = None):
    self.rules, self.ranges, self.opts, self.describe = rules, ranges, opts, describe
    self.count = 0  # optional transformations numbered so far
    self.skipped = 0  # of them, and of the named rules' matches, how many were turned off
    self.described: dict[str, Any] | None = None
    self.kernel: str | None = None  # the kernel being optimized and compiled (compiler.engine sets it)

  @staticmethod
  def from_env() -> Switches | None:
    """The environment's switches; None where none is set (then graph_rewrite checks nothing more)."""
    env = {k: os.environ.get(k, "") for k in ("SKIP_RULES", "SKIP_MATCHES", "SKIP_OPTS", "SKIP_REPORT",
                                                "SKIP_DESCRIBE")}
    if not any(env.values()):
      return None
    opts = _names(env["SKIP_OPTS"])
    describe = env["SKIP_DESCRIBE"].strip()
    if describe and not describe.isdigit():
      raise ValueError(f"SKIP_DESCRIBE must be a match number, got {describe!r}")
    sw = Switches(_names(env["SKIP_RULES"]), parse_ranges(env["SKIP_MATCHES"]),
                  frozenset({"*"}) if opts & {"1", "all"} else opts - {"0"}, int(describe) if describe else None)
    if env["SKIP_REPORT"]:
      atexit.register(sw.write_report, env["SKIP_REPORT"])
    return sw

  def meta(self) -> dict[str, Any]:
    """What was off, for the trace's meta record (the viewer and `compiler.trace info` say it)."""
    ranges = ",".join(f"{a}" if a == b else f"{a}-" if b == float("inf") else f"{a}-{b}" for a, b in self.ranges)
    return {"rules": sorted(self.rules), "matches": ranges, "opts": sorted(self.opts)}

  def active(self) -> bool:
    """Whether anything is turned off (a run that only numbers, for SKIP_REPORT, is not)."""
    return bool(self.rules or self.ranges or self.opts)

  def _number(self, what: Callable[[], dict[str, Any]]) -> bool:
    n = self.count
    self.count = n + 1
    if n == self.describe:
      self.described = {**what(), "match": n}
    return any(a <= n <= b for a, b in self.ranges)

  def rule_off(self, rule: Rule, rw: _Rewriter) -> bool:
    """Number a match of rule (an optional one) and say whether it is off (skipped: as if the rule had not matched)."""
    off = rule.name in self.rules or (rule.optional and self._number(lambda: self._rule_info(rule, rw)))
    self.skipped += off
    return off

  def opt_off(self, opt_name: str, kernel: str, where: tuple[str, int]) -> bool:
    """Number an applied kernel opt (`UPCAST(0, 4)` of kernel `r_16_16`) and say whether it is off."""
    def info() -> dict[str, Any]:
      return {"kind": "opt", "name": opt_name, "file": where[0], "line": where[1], "pass": "optimize",
              "kernel": kernel, **self._where(None, None)}
    numbered_off = self._number(info)
    off = numbered_off or "*" in self.opts or kernel in self.opts or opt_name.partition("(")[0] in self.opts
    self.skipped += off
    return off

  def _rule_info(self, rule: Rule, rw: _Rewriter) -> dict[str, Any]:
    file, line = rule.location
    return {"kind": "rule", "name": rule.name, "file": file, "line": line, "pass": rw.name, "kernel": self.kernel,
            **self._where(rw.rw_id if rw.rec is not None else None, rw.matches + 1 if rw.rec is not None else None)}

  @staticmethod
  def _where(rw_id: int | None, step: int | None) -> dict[str, Any]:
    """Where the viewer shows it in the trace being recorded: context, rewrite and step (None where untraced)."""
    rec = recorder.RECORDER
    return {"ctx": rec.ctx_stack[-1] if rec is not None else None, "rw": rw_id, "step": step}

  def write_report(self, path: str) -> None:
    """Write {"count", "skipped", "described"} to path (at exit, for `python -m compiler.trace bisect`)."""
    import json
    with open(path, "w") as f:
      json.dump({"count": self.count, "skipped": self.skipped, "described": self.described}, f)


# the switches of this run (env, read once); None: none, and a match costs one check
SWITCHES: Switches | None = Switches.from_env()


class RewriteLoopError(RuntimeError):
  """A graph_rewrite did not reach a fixed point."""


# how many rewrites of one node (chained) before we call it a loop
MAX_CHAIN = 1000


class _Rewriter:
  __slots__ = ("pm", "ctx", "bottom_up", "name", "rec", "rw_id", "matches", "replace", "last_rule")

  def __init__(self, pm: PatternMatcher, ctx: Any, bottom_up: bool, name: str, rec: Any):
    self.pm, self.ctx, self.bottom_up, self.name, self.rec = pm, ctx, bottom_up, name, rec
    self.rw_id, self.matches, self.replace, self.last_rule = 0, 0, {}, None

  def _apply(self, u: UOp, rules: tuple[Rule, ...] | None = None) -> tuple[UOp | None, Rule | None]:
    """The first rule's result for u (and the rule), or (None, None); no clock, no bookkeeping (not recording).
    rules: pm.rules_for(u) where the caller has looked them up."""
    ctx, pm = self.ctx, self.pm
    if rules is None:  # (rules_for's lookup, inlined)
      rules = pm._by_src0.get((u.op, u.dtype if pm._by_dtype else None, u.src[0].op if u.src else None))
    for rule in rules if rules is not None else pm.rules_for(u):
      cap = rule.node_cap
      if cap is not None and rule.node_test is not None and not rule.node_test(u):
        continue
      for caps in rule.pat.match(u, {}) if cap is None else ({cap: u} if cap else {},):
        ret = rule.fn(ctx=ctx, **caps) if rule.takes_ctx else rule.fn(**caps)
        if ret is not None and ret is not u:
          if SWITCHES is not None and SWITCHES.rule_off(rule, self):  # (a match's one check when no switch is on)
            continue
          return self._matched(rule, ret)
    return None, None

  def _matched(self, rule: Rule, ret: Any) -> tuple[UOp, Rule]:
    if not isinstance(ret, UOp):
      raise TypeError(f"rule {rule.name!r} at {_loc(rule)} in pass {self.name!r} returned "
                      f"{type(ret).__name__}, not a UOp")
    self.matches += 1
    self.last_rule = rule
    return ret, rule

  def _fixed_point(self, u: UOp, first_rules: tuple[Rule, ...] | None = None) -> UOp:
    new, rule = self._apply(u, first_rules)
    if new is None:  # most nodes match nothing: no chain to follow, nothing to allocate
      return u
    seen: set[UOp] = {u}
    rules: list[Rule] = []
    first, limit = u, MAX_CHAIN
    while True:
      rules = [*rules[-7:], rule]
      if new in seen:
        self._loop(rules, u)
      if len(seen) > limit:
        if limit == MAX_CHAIN:  # a chain that folds the graph (1,000s of reshapes, one per step) ends within its size
          limit += len(toposort(first))
        if len(seen) > limit:
          self._loop(rules, u)
      seen.add(new)
      u = new
      new, rule = self._apply(u)
      if new is None:
        return u

  def _loop(self, rules: list, u: UOp) -> None:
    names = ", ".join(dict.fromkeys(f"{r.name!r} ({_loc(r)})" for r in rules[-8:]))
    raise RewriteLoopError(f"graph_rewrite {self.name!r} does not converge: rules {names} keep rewriting "
                           f"{u.op.name} node")

  def rewrite(self, root: UOp) -> UOp:
    # changed: the final nodes whose result is another node (replace[n] is not n), kept exact: a node made final as its
    # own result leaves it (it may have been final before with another: a rule that no longer fires on it, one whose
    # ctx changed, or the viewer's oracle that stops after k matches). stack entries: (original node, stage, current
    # node, chain length), or a bare node: (node, 0, node, 0)
    replace, in_progress, changed, stack = self.replace, set(), set(), [root]
    bottom_up, recording, pm = self.bottom_up, self.rec is not None, self.pm
    final, is_final = replace.__getitem__, replace.__contains__
    by_src0, by_dtype = pm._by_src0.get, pm._by_dtype
    while stack:
      n = stack.pop()
      if type(n) is tuple:
        n, stage, new_n, chain = n
      else:  # (a source to rewrite: pushed bare, no tuple made and unpacked for most of the stack's entries)
        new_n, stage, chain = n, 0, 0
      if stage == 0:
        if n in replace:
          continue
        if n in in_progress:  # a rewrite result contains the node being rewritten: it can only grow
          rule = self.last_rule
          by = f" (last rule: {rule.name!r} at {_loc(rule)})" if rule is not None else ""
          raise RewriteLoopError(f"graph_rewrite {self.name!r} does not converge: a {n.op.name} node is part of "
                                 f"its own rewrite result{by}")
        src = n.src
        if not bottom_up:
          # (_apply's rule lookup, asked here first: most nodes of most passes have no rule of their op, dtype and
          # first source's op, and then no rewrite to follow: no call)
          rules = by_src0((n.op, n.dtype if by_dtype else None, src[0].op if src else None))
          if rules is None:
            rules = pm.rules_for(n)
          if rules:
            new_n = self._fixed_point(n, rules)
            src = new_n.src
          if not src:  # a leaf: final now (what stage 1 would find, without the round trip or in_progress)
            replace[n] = replace[new_n] = new_n
            if n is not new_n:
              changed.add(n)
              changed.discard(new_n)  # (final before with another result, maybe: see above)
            continue
        in_progress.add(n)  # (until its result is final: met again before, it is part of its own result)
        if not all(map(is_final, src)):  # (stops at the first source not done: on a first visit, the first)
          stack.append((n, 1, new_n, chain))
          stack.extend([s for s in reversed(src) if s not in replace])
          continue
        stage = 1  # its sources are final (every lane expansion makes): on to stage 1 now, not by the stack
      elif stage == 1:
        src = new_n.src
      if stage == 1:
        if changed.isdisjoint(src):  # every source is its own result (no tuple of the results made to compare)
          if bottom_up:
            rules = by_src0((new_n.op, new_n.dtype if by_dtype else None, src[0].op if src else None))
            if rules is None:
              rules = pm.rules_for(new_n)
            new, rule = self._apply(new_n, rules) if rules else (None, None)
            if new is not None:
              if chain > MAX_CHAIN:
                self._loop([rule], new_n)
              stack.append((n, 2, new, chain))
              stack.append((new, 0, new, chain + 1))
              continue
          replace[n] = replace[new_n] = new_n  # a final node is its own result: never walk it again
          if n is not new_n:
            changed.add(n)
            changed.discard(new_n)  # (final before with another result, maybe: see above)
          in_progress.discard(n)
        else:  # (new_n.replace(src=...), without its kwargs)
          rebuilt = UOp(new_n.op, new_n.dtype, tuple(map(final, src)), new_n.arg)
          if recording and new_n.callsite is not None and rebuilt.callsite is None:
            recorder.inherit_callsite(rebuilt, new_n)  # the same op of the user's line, over rewritten sources
          if chain > MAX_CHAIN:
            self._loop([self.last_rule] if self.last_rule is not None else [], new_n)
          stack.append((n, 2, rebuilt, chain))
          stack.append((rebuilt, 0, rebuilt, chain + 1))
      else:
        got = replace[n] = replace[new_n]  # (new_n: n's rewrite, whose result is not n: that would be a loop)
        if got is not n:
          changed.add(n)
        in_progress.discard(n)
    return replace[root]


class _RecordedRewriter(_Rewriter):
  """_Rewriter while recording: its own class, so that a node tried costs no test of whether to record."""
  __slots__ = ()

  def _apply(self, u: UOp, rules: tuple[Rule, ...] | None = None) -> tuple[UOp | None, Rule | None]:
    """_Rewriter._apply's rules tried the same way, each rule's call timed: a match is recorded with its time."""
    ctx, pm, rec = self.ctx, self.pm, self.rec
    if rules is None:
      rules = pm._by_src0.get((u.op, u.dtype if pm._by_dtype else None, u.src[0].op if u.src else None))
    for rule in rules if rules is not None else pm.rules_for(u):
      cap = rule.node_cap
      if cap is not None and rule.node_test is not None and not rule.node_test(u):
        continue
      for caps in rule.pat.match(u, {}) if cap is None else ({cap: u} if cap else {},):
        t0 = perf_counter_ns()
        try:
          ret = rule.fn(ctx=ctx, **caps) if rule.takes_ctx else rule.fn(**caps)
        except Exception as e:
          rec.match_error(self.rw_id, rule, u, e)
          raise
        if ret is not None and ret is not u:
          if SWITCHES is not None and SWITCHES.rule_off(rule, self):
            continue
          self._matched(rule, ret)
          rec.match(self.rw_id, rule, u, ret, perf_counter_ns() - t0)
          return ret, rule
    return None, None


def _loc(rule: Rule) -> str:
  f, line = rule.location
  return f"{f}:{line}"


def _caller() -> tuple[str, int]:
  """The first frame outside this module: where the user called graph_rewrite."""
  f = sys._getframe(1)
  while f is not None and f.f_code.co_filename == __file__:
    f = f.f_back
  return (f.f_code.co_filename, f.f_lineno) if f is not None else ("<unknown>", 0)


def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, name: str | None = None,
                  bottom_up: bool = False) -> UOp:
  """Rewrite the graph of `sink` with `pm` to a fixed point (top-down, or bottom-up: sources first) as the pass `name`,
  by default the matcher's name (the compiler's passes all take it but a kernel opt's, "apply UPCAST(0, 4)", which
  names the opt: tests/compiler/test_pass_names.py)."""
  rec = recorder.RECORDER
  pass_name = name or pm.name or "graph_rewrite"
  if rec is None:
    return _Rewriter(pm, ctx, bottom_up, pass_name, None).rewrite(sink)
  rw = _RecordedRewriter(pm, ctx, bottom_up, pass_name, rec)
  file, line = _caller()
  rw.rw_id = rec.rewrite_begin(pass_name, file, line, bottom_up, sink)
  t0 = time.perf_counter_ns()
  try:
    out = rw.rewrite(sink)
  except BaseException as e:
    rec.rewrite_end(rw.rw_id, None, time.perf_counter_ns() - t0, rw.matches, error=f"{type(e).__name__}: {e}")
    raise
  rec.rewrite_end(rw.rw_id, out, time.perf_counter_ns() - t0, rw.matches)
  return out


def track_graph(sink: UOp, name: str) -> UOp:
  """Record a snapshot of a graph as an empty rewrite (e.g. "View Base AST"); a no-op when tracing is off."""
  rec = recorder.RECORDER
  if rec is not None:  # no rewriter walk: a rewrite with no rules changes nothing, so record its ends directly
    file, line = _caller()
    rid = rec.rewrite_begin(name, file, line, False, sink)
    rec.rewrite_end(rid, sink, 0, 0)
  return sink
