"""Entry point of `python -m compiler.trace`."""
import os
import sys

from compiler.trace.cli import TOOLS, main

if sys.argv[1:2] and sys.argv[1] in TOOLS and os.name == "posix" and sys.executable:
  # the viewer's tools become `python -m viz_server.tools` in this very process (cli.run_tool's child, without this
  # interpreter waiting on it and then tearing the compiler down: the compiler never imports viz_server). Most starts
  # never get here: compiler/__init__.py execs the tool first, before the compiler is imported (_tool_argv)
  os.execv(sys.executable, [sys.executable, "-m", "viz_server.tools", *sys.argv[1:]])
raise SystemExit(main())
