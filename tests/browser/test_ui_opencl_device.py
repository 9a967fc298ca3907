"""A program on the CL device in the viewer (issue 33): the GROUP + LOCAL matvec's kernel panel shows its launch
(global and local sizes) and the opts with their colored shapes, the source panel its OpenCL C with the __local
reduction, and the copies between devices are contexts of their own and spans of the timeline, whose memory lanes
are one per device."""
from __future__ import annotations

from support.browser import open_page, shot
from support.cl_helpers import record_cl_device_matvec


def test_cl_device_program_shows_group_local_kernel_source_and_copies(page, server, trace_dir):
  record_cl_device_matvec(trace_dir / "cl-device.vztrace")
  t = server.trace_id("cl-device.vztrace", ended=True)
  k = next(k for k in server.api(f"/api/traces/{t}/kernels") if k["name"].startswith("r_"))
  body = server.api(f"/api/traces/{t}/contexts/{k['ctx']}/kernel")
  launch = body["launch"]
  assert launch["local"] and launch["local"] != [1] * len(launch["local"]), "LOCAL and GROUP make work-groups"

  open_page(page, server, f"#t={t}&c={k['ctx']}&p=kernel")
  page.locator("#panel-kernel p.launch").wait_for()
  text = page.locator("#panel-kernel p.launch").inner_text()
  assert text.startswith("global [") and f"local [{', '.join(map(str, launch['local']))}]" in text
  ops = page.locator("#panel-kernel ol.opts li.opt.ok .opname").all_inner_texts()
  assert ops == ["LOCAL(0, 8)", "GROUP(0, 16)"]
  dims = page.locator("#panel-kernel ol.opts li.opt.ok").nth(1).locator("span.dim")
  titles = dims.evaluate_all("es => es.map(e => [e.title, e.style.color])")
  colors = {title.split(": ")[-1]: css for title, css in titles}
  assert {"cyan", "green"} <= set(colors) and colors["cyan"] != colors["green"]  # the seed's LOCAL and GROUP
  shot(page, "kernel-cl-group-local")

  open_page(page, server, f"#t={t}&c={k['ctx']}&p=source")
  page.locator("#panel-source .subtabs button[data-kind='opencl']").click()
  pre = page.locator("#panel-source pre.source[data-kind='opencl']")
  pre.wait_for()
  src = pre.evaluate("e => e.textContent")
  assert "__local" in src and "barrier(CLK_LOCAL_MEM_FENCE)" in src and "get_local_id" in src

  copies = ["copy 256, CL <- CPU", "copy 8192, CL <- CPU", "copy 128, CPU <- CL"]
  for name in copies:
    assert page.locator("#contexts", has_text=name).count() == 1, name
  page.keyboard.press("6")
  page.locator("#panel-timeline canvas").wait_for()
  page.wait_for_function("() => { const p = window.__viz.timelinePanel; return p.devLanes.length === 1 && "
                         "p.devLanes[0].drawn && p.devLanes[0].drawn.peak; }")
  lanes = page.evaluate("() => { const p = window.__viz.timelinePanel; return [p.devLanes[0].device, "
                        "p.devLanes[0].rows[0].label, p.memLane.rows.length ? p.memLane.rows[0].label : null, "
                        "p.hits.filter(h => h.kind === 'run').map(h => h.name)]; }")
  assert lanes[:3] == ["CL", "memory CL", "memory CPU"]
  assert set(copies) <= {r["kname"] for r in server.api(f"/api/traces/{t}/timeline")["runs"]}
  # the copies and the kernel's run side by side in the runs lane (spans under a pixel share one hit)
  assert "copy 256, CL <- CPU" in lanes[3] and any(n.startswith("r_") for n in lanes[3]), lanes[3]
  shot(page, "timeline-cl-device")
