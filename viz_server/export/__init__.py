"""The single-file HTML export (`python -m compiler.trace export FILE -o OUT.html`, the top bar's Export button): one
file showing a trace read-only, opened from file:// with no server and no request. See "Trace tools" in
docs/architecture.md.

Python, which builds the file (in the order an export runs):
- collect.py: the API's answers the page will ask for, collected through the API itself (viz_server/offline.py),
  a rewrite at a time: collect_packed packs each as it is made (collect holds the whole data, for the tests);
- redact.py: every string of them redacted by what it holds (paths, the user's and host's names);
- layouts.py: step-0 layouts shared between rewrites whose graphs have one shape under other ids (SharedLayouts);
- workers.py: the rewrites' views (step-0 graph, compact deltas: the viewer's layouts and derivations) made in
  forked worker processes and handed back in order (forked), or in this process (in_process);
- graphs.py: each rewrite's graphs as its step-0 graph and one compact delta per step (GraphPacker), the edges the
  page derives left out (EdgeStrip);
- pack.py: that data as columns and differences, which deflate small (Packer; the page's unpack.js decodes it);
- bundle.py: static/*.js as one inline module;
- page.py: the HTML page: templates/index.html with the UI, the style and the data inlined, and its CSP (write:
  the data deflated and written piece by piece);
- command.py: the `export` command (export, run).
JavaScript, the page's own scripts (page.SHIM, then the UI's bundle, in one inline module that page.BOOT starts):
- boot.js: inflates the embedded UI and data (page.py's _digits, the other way);
- hash.js: diff.py's structural hashes (structural_hashes), computed in the page instead of embedded;
- unpack.js: pack.py's data back as collect made it (tests/support/export_unpack.py is the same in Python);
- graphs.js: GET /rewrites/<r>/graph and /delta (viz_server/stepgraphs.py) rebuilt from graphs.py's form;
- diff.js: GET /api/diff (viz_server/diff.py's diff_graphs, difflib's unified_diff);
- shim.js: globalThis.tinyvizOffline(path), which static/api.js asks instead of fetch: the routes above, and every
  other answer as embedded.
Tests hold each port to what it mirrors: tests/viewer/test_export_pack.py (unpack.js, hash.js, diff.js against
Python), tests/browser/test_ui_export.py and test_export_firefox.py (every graph, delta and diff against the API)."""
from __future__ import annotations


class ExportError(ValueError):
  """The UI's files are not in a form the exporter can bundle, or an option names nothing in the trace."""
