"""Devices (issue 33, compiler/device.py): tensors on the OpenCL device ("CL", Debian's pocl here) whose buffers live
there between kernels, COPY steps between devices in the schedule and the trace, DEV as the default device, and a
clear error for an op whose operands live on two devices. pocl builds each new kernel in 0.4-2 s: few kernels."""
from __future__ import annotations

import numpy as np
import pytest
from support.server_helpers import recording

from compiler.nn.optim import Adam
from compiler.runtime.opencl import get_device
from compiler.tensor import Tensor
from viz_server.app import create_app
from vztrace.reader import TraceReader

SPECIALS = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-45, 3.4e38], dtype=np.float32)


def test_creation_on_cl_and_round_trips_are_bit_exact():
  for name in ("CL", "cl", "CL:0"):
    assert Tensor(SPECIALS, device=name).device == "CL"
  x = Tensor(SPECIALS.reshape(3, 3), device="CL")
  back = x.to("CPU")
  assert (x.shape, back.device, Tensor(SPECIALS).device) == ((3, 3), "CPU", "CPU")
  got = back.numpy()
  assert got.dtype == np.float32 and got.tobytes() == SPECIALS.reshape(3, 3).tobytes()  # nan, -0.0 and all
  assert x.numpy().tobytes() == SPECIALS.tobytes()  # (.numpy() of a CL tensor reads it back)
  ints = Tensor.arange(5, device="CL")
  zeros = Tensor.zeros(2, 3, device="CL")
  assert (ints.device, zeros.device, Tensor(2.0, device="CL").device) == ("CL", "CL", "CL")
  assert ints.numpy().tolist() == [0, 1, 2, 3, 4] and zeros.numpy().tolist() == [[0.0] * 3] * 2
  assert Tensor(7, device="CL").item() == 7
  with pytest.raises(ValueError, match="unknown device 'GPU:1'"):
    Tensor(SPECIALS, device="GPU:1")


def test_a_chain_of_cl_kernels_copies_nothing_between_them():
  a = np.linspace(-2, 2, 64, dtype=np.float32).reshape(8, 8)
  x = Tensor(a, device="CL").realize()
  dev = get_device()
  before = dict(dev.copies)
  y = (x * 3 + 1).contiguous()
  z = (y.exp() - y).sum(axis=1)
  z.realize()  # two kernels, y's buffer read on the device by the second
  assert dev.copies == before
  got = z.numpy()
  assert dev.copies == {"in": before["in"], "out": before["out"] + 1}  # one read back, nothing else
  y64 = a.astype(np.float64) * 3 + 1
  np.testing.assert_allclose(got, (np.exp(y64) - y64).sum(axis=1), rtol=1e-5)


def test_copies_are_steps_of_the_schedule_and_of_the_trace(tmp_path):
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  steps = (Tensor(a).to("CL") + 1).schedule()
  assert [si.is_copy for si in steps] == [True, False] and steps[0].name == "copy 48, CL <- CPU"
  assert [b.device for b in steps[0].bufs] == ["CL", "CPU"] and {b.device for b in steps[1].bufs} == {"CL"}
  path = tmp_path / "copies.vztrace"
  with recording(path):
    out = ((Tensor(a).to("CL") + 1).to("CPU") * 2).numpy()
  np.testing.assert_array_equal(out, (a + 1) * 2)
  recs = list(TraceReader(path))
  copies = {r["id"]: r["name"] for r in recs if r["t"] == "ctx_begin" and r["kind"] == "copy"}
  assert sorted(copies.values()) == ["copy 48, CL <- CPU", "copy 48, CPU <- CL"]
  runs = [r for r in recs if r["t"] == "run" and r["ctx"] in copies]
  assert len(runs) == 2 and all(r["bytes"] == 48 and r["times"][0] > 0 for r in runs)
  cl_mem = [r for r in recs if r["t"] == "mem" and r.get("device") == "CL"]
  assert {r["op"] for r in cl_mem} >= {"alloc"} and all(r["bytes"] == 48 for r in cl_mem)
  tl = create_app([path], follow=False).test_client().get("/api/traces/0/timeline").get_json()
  lanes = {m["device"]: m for m in tl["memory_devices"]}
  assert list(lanes) == ["CL"] and lanes["CL"]["peak"]["bytes"] >= 96  # the copy in and the kernel's output
  assert tl["memory"]["peak"]["bytes"] > 0 and {r["kname"] for r in tl["runs"]} >= set(copies.values())


def test_mixing_devices_in_one_op_names_both():
  cpu, cl = Tensor(np.ones((2, 2), np.float32)), Tensor(np.ones((2, 2), np.float32), device="CL")
  cases = {"add": lambda: cpu + cl, "matmul": lambda: cl @ cpu, "cat": lambda: cl.cat(cpu),
           "where": lambda: (cl > 0).where(cpu, 1.0), "assign": lambda: cpu.realize().assign(cl)}
  for op, fn in cases.items():
    with pytest.raises(RuntimeError, match=rf"Tensor\.{op}: operands on different devices, (CPU and CL|CL and CPU)"):
      fn()
  assert (cl + 1.0).device == "CL" and (cl > 0).where(cl, 2.0).device == "CL"  # constants follow the tensor


def test_a_copy_gives_its_gradient_back_on_the_source_device():
  t = Tensor(np.arange(3, dtype=np.float32), requires_grad=True)
  c = Tensor(np.array([1.0, 2.0, 3.0], np.float32), device="CL")
  ((t.to("CL") * c) ** 2).sum().backward()
  assert t.grad.device == "CPU"
  np.testing.assert_array_equal(t.grad.numpy(), 2 * np.arange(3) * np.array([1.0, 4.0, 9.0], np.float32))


def test_dev_env_names_the_default_device(monkeypatch):
  monkeypatch.setenv("DEV", "cl")
  a = np.arange(6, dtype=np.float32)
  x = Tensor(a)
  assert (x.device, Tensor.ones(3).device, Tensor.rand(2).device) == ("CL", "CL", "CL")
  assert Tensor(a, device="CPU").device == "CPU"
  with pytest.raises(RuntimeError, match="different devices"):
    Tensor(a, device="CPU") + x
  np.testing.assert_array_equal((x * 2).numpy(), a * 2)


def _train(device: str) -> list[np.ndarray]:
  """Two Adam steps of a 2-layer MLP (6 -> 8 -> 3) on `device`: the loss of each and the weights after."""
  rng = np.random.default_rng(0)
  shapes = [(6, 8), (8,), (8, 3), (3,)]
  w1, b1, w2, b2 = params = [Tensor((rng.standard_normal(s) * 0.5).astype(np.float32), device=device,
                                    requires_grad=True) for s in shapes]
  x = Tensor(rng.standard_normal((5, 6)).astype(np.float32), device=device)
  y = Tensor(rng.standard_normal((5, 3)).astype(np.float32), device=device)
  opt = Adam(params, lr=0.05)
  losses = []
  for _ in range(2):
    loss = (((x @ w1 + b1).relu() @ w2 + b2 - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.numpy())
  assert all(p.device == device for p in params + opt.m + opt.v)
  return losses + [p.numpy() for p in params]


def test_mlp_forward_backward_and_adam_on_cl_match_the_cpu():
  cpu, cl = _train("CPU"), _train("CL")
  for got, want in zip(cl, cpu):
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_from_numpy_and_every_creation_function_land_on_the_default_device(monkeypatch):
  monkeypatch.setenv("DEV", "CL")
  a = np.arange(6, dtype=np.float32)
  x = Tensor.from_numpy(a)
  assert x.device == "CL" and Tensor.from_numpy(a, device="CPU").device == "CPU"
  np.testing.assert_array_equal(x.numpy(), a)
  monkeypatch.delenv("DEV")
  cl = Tensor(a, device="CL")
  made = {"from_numpy": Tensor.from_numpy(a, device="cl"), "rand_like": cl.rand_like(),
          "randn_like": cl.randn_like(), "linspace": Tensor.linspace(0, 1, 5, device="CL"),
          "normal": Tensor.normal(3, device="CL"), "scaled_uniform": Tensor.scaled_uniform(2, 3, device="CL"),
          "glorot": Tensor.glorot_uniform(2, 3, device="CL"), "kaiming": Tensor.kaiming_uniform(2, 3, device="CL"),
          "kaiming_normal": Tensor.kaiming_normal(2, 3, device="CL")}
  assert {k: t.device for k, t in made.items()} == dict.fromkeys(made, "CL")
  np.testing.assert_array_equal(made["linspace"].numpy(), np.linspace(0, 1, 5, dtype=np.float32))


def test_oracle_copies_to_the_device_and_keeps_values_there(monkeypatch):
  """ORACLE=1 on a CL program: a COPY's value is copied, results land in buffers on their node's device (read back
  from it), and an assign writes the device's memory."""
  monkeypatch.setenv("ORACLE", "1")
  a = np.arange(6, dtype=np.float32)
  src = Tensor(a)
  y = (src.to("CL") * 2 + 1).realize()
  assert y.device == "CL" and y.uop.src[0].arg[2] == "CL"  # (RESHAPE of a BUFFER whose arg names the device)
  np.testing.assert_array_equal(y.numpy(), a * 2 + 1)
  w = Tensor(a, device="CL").realize()
  w.assign(w + y).realize()
  assert w.device == "CL"
  np.testing.assert_array_equal(w.numpy(), a * 3 + 1)
  back = y.to("CPU").realize()
  assert back.device == "CPU" and back.uop.src[0].arg[2:] == ()
  np.testing.assert_array_equal(back.numpy(), a * 2 + 1)
  np.testing.assert_array_equal(src.numpy(), a)  # (the copy's source is untouched)
