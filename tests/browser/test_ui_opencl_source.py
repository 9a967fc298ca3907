"""A CL kernel in the viewer (issue 33): the source panel offers its OpenCL C, highlighted, with its launch's sizes;
the kernel panel shows "global [..] local [..]"."""
from __future__ import annotations

from support.browser import open_page, shot
from support.cl_helpers import record_cl_matmul_relu


def test_source_panel_shows_highlighted_opencl_and_kernel_panel_the_sizes(page, server, trace_dir):
  record_cl_matmul_relu(trace_dir / "cl.vztrace")
  t = server.trace_id("cl.vztrace", ended=True)
  k = next(k for k in server.api(f"/api/traces/{t}/kernels") if k["name"].startswith("r_"))
  body = server.api(f"/api/traces/{t}/contexts/{k['ctx']}/kernel")
  src = next(s for s in body["sources"] if s["kind"] == "opencl")
  local = body["launch"]["local"]  # (the GPU heuristics give a matmul a work-group; None: the driver picks one)
  sizes = f"global [{', '.join(map(str, body['launch']['global']))}] local " + \
    (f"[{', '.join(map(str, local))}]" if local else "(the driver's)")

  open_page(page, server, f"#t={t}&c={k['ctx']}&p=source")
  tab = page.locator("#panel-source .subtabs button[data-kind='opencl']")
  assert tab.inner_text() == "OpenCL C"
  tab.click()
  pre = page.locator("#panel-source pre.source[data-kind='opencl']")
  pre.wait_for()
  assert pre.evaluate("e => e.textContent") == src["text"]
  kernel_kw = pre.locator("span.k", has_text="__kernel").first
  assert kernel_kw.inner_text() == "__kernel"
  color = "e => getComputedStyle(e).color"
  assert kernel_kw.evaluate(color) != pre.evaluate(color)  # (the page's stylesheet colours the token classes)
  assert pre.locator("span.nb", has_text="get_global_id").count() >= 1
  assert pre.locator("span.nf").first.inner_text() == k["name"]
  assert sizes in page.locator("#panel-source .panel-head .sub").inner_text()
  shot(page, "source-opencl")

  open_page(page, server, f"#t={t}&c={k['ctx']}&p=kernel")
  launch = page.locator("#panel-kernel p.launch")
  launch.wait_for()
  assert launch.inner_text() == sizes
