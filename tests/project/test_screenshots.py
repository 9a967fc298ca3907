"""The README's screenshots stay current (issue 30): the README shows exactly the shots docs/screenshots.py takes, each
file is there and nothing else is, and the script photographs every panel static/panels.js registers (a panel added
without a shot, or a shot of a panel that is gone, fails here; the pixels are the script's to renew)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PANEL_ENTRY = re.compile(r'^\s*id: "([\w-]+)", label: "[^"]*", key: "[^"]*"', re.M)


def _shots() -> dict[str, str]:
  spec = importlib.util.spec_from_file_location("screenshots", ROOT / "docs" / "screenshots.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)  # (playwright is imported only when it photographs)
  return mod.SHOTS


def test_the_readme_shows_what_the_script_takes_of_every_panel():
  shots = _shots()
  readme = (ROOT / "README.md").read_text()
  shown = re.findall(r"!\[[^\]]*\]\(docs/img/([\w-]+)\.png\)", readme)
  assert sorted(shown) == sorted(shots), (shown, sorted(shots))  # each once, none the script does not take
  assert "docs/screenshots.py" in readme
  files = {p.stem for p in (ROOT / "docs" / "img").glob("*.png")}
  assert files == set(shots), files ^ set(shots)
  panels = PANEL_ENTRY.findall((ROOT / "static" / "panels.js").read_text())
  assert len(panels) >= 7 and set(shots.values()) == set(panels), (set(panels) ^ set(shots.values()))
