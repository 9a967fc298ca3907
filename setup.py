"""The socket.io browser client copied into the wheel; everything else about the package is in pyproject.toml."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOCKETIO_PACKAGE = Path(__file__).resolve().parent / "node_modules" / "socket.io-client"
SOCKETIO_CLIENT = "dist/socket.io.esm.min.js"


class build_py_with_client(build_py):
  """Also puts npm's socket.io browser client (MIT) into viz_server/vendor/ of the build, with its license, where
  node_modules has it: a pip-installed viewer then gets live updates without npm (viz_server/__main__.py looks there
  first). Nothing third-party is committed to git; built without node_modules, the page polls instead."""

  def run(self) -> None:
    super().run()
    client = SOCKETIO_PACKAGE / SOCKETIO_CLIENT
    if not client.is_file():
      print(f"note: {client} not found (run `npm ci`): the wheel's viewer will poll instead of using socket.io")
      return
    out = Path(self.build_lib) / "viz_server" / "vendor"
    self.mkpath(str(out))
    self.copy_file(str(client), str(out / client.name))
    self.copy_file(str(SOCKETIO_PACKAGE / "LICENSE"), str(out / "socket.io-client.LICENSE"))


setup(cmdclass={"build_py": build_py_with_client})
