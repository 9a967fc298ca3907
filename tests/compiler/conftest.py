"""The compiler tests' one backend parametrization: a test (or a module, through `pytestmark`) that uses the `backend`
fixture runs once per backend of support.backends.backends_for (CL where the module sets `ON_CL = True`, or with
TINYVIZ_TEST_CL=all), with BACKEND set for everything it realizes."""
from __future__ import annotations

import pytest
from support.backends import backends_for


def _parametrized_by_hand(metafunc) -> bool:
  """A test whose own parametrize names `backend` (its own list of backends) keeps it."""
  marks = metafunc.definition.iter_markers("parametrize")
  return any("backend" in str(m.args[0]).replace(" ", "").split(",") for m in marks)


def pytest_generate_tests(metafunc):
  if "backend" in metafunc.fixturenames and not _parametrized_by_hand(metafunc):
    metafunc.parametrize("backend", backends_for(getattr(metafunc.module, "ON_CL", False)), indirect=True)


@pytest.fixture
def backend(request, monkeypatch) -> str:
  monkeypatch.setenv("BACKEND", request.param)
  return request.param
