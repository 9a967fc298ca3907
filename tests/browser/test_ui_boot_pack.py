"""The page's first view asks /api/boot packed (pack=1) and makes the contexts of it that /contexts answers."""
from __future__ import annotations

import urllib.request

from support.browser import open_page


def test_the_page_unpacks_the_boot_answers_contexts(new_page, server):
  for name in ("demo.vztrace", "evil.vztrace"):  # (evil: hostile names and files, each a string to intern)
    t = server.trace_id(name)
    page = new_page()
    open_page(page, server, f"#t={t}")
    got = page.evaluate("() => window.__viz.data.contexts")
    assert got == server.api(f"/api/traces/{t}/contexts") and any(c["rewrites"] for c in got)
    sizes = page.evaluate("""() => performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/boot'))
      .map((e) => [new URL(e.name).search, e.encodedBodySize])""")
    assert [q for q, _ in sizes] == [f"?t={t}&compact=1&pack=1"]
    with urllib.request.urlopen(f"{server.url}/api/boot?t={t}&compact=1", timeout=30) as r:
      assert sizes[0][1] < len(r.read()), sizes  # (the answer unpacked)
