# Two entry points: `make demo` (compile real workloads with VIZ=1 and serve the UI) and `make test`.
# Both do all set-up on a fresh machine: a venv with the project installed, npm packages, Debian's chromium.
VENV ?= .venv
PY := $(VENV)/bin/python
# the viewer's port for `make demo`: PORT=, or VIZ_PORT= as the scripts take it (make's command line or environment)
PORT ?= $(or $(VIZ_PORT),8000)

.PHONY: demo test test-cl venv node chromium firefox pocl lint bench clean

venv: $(VENV)/.stamp
$(VENV)/.stamp: pyproject.toml setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

node: node_modules/.stamp
node_modules/.stamp: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Debian's chromium drives the browser tests (Playwright cannot download its own browser here).
chromium:
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# Debian's Firefox ESR opens the export in tests/browser/test_export_firefox.py (driven over WebDriver BiDi).
firefox:
	@test -x /usr/bin/firefox-esr || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq firefox-esr; }

# Debian's pocl: an OpenCL device on the CPU, which BACKEND=cl and tests/compiler/test_opencl*.py run on.
pocl:
	@test -e /etc/OpenCL/vendors/pocl.icd || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd; }

demo: venv node
	VIZ=1 VIZ_PORT=$(PORT) $(PY) examples/demo.py

test: venv node chromium firefox pocl
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 2 --dist loadfile -p no:cacheprovider

# every compiler value test on OpenCL too (pocl builds each kernel in 0.4-2 s: ~15 more minutes on 2 cores)
test-cl: venv pocl
	TINYVIZ_TEST_CL=all $(PY) -m pytest -q -n 2 --dist loadfile -p no:cacheprovider tests/compiler

lint: venv
	$(PY) -m ruff check .

# every benchmark, each printing its table (quick modes where a script has one)
bench: venv node
	$(PY) bench/bench_kernels.py
	$(PY) bench/bench_schedule.py
	$(PY) bench/bench_beam.py
	$(PY) bench/bench_trace_overhead.py --quick
	$(PY) bench/trace_size.py
	$(PY) bench/fuzz_trace_reader.py 20000
	$(PY) bench/bench_symbolic.py --quick
	$(PY) bench/bench_layout.py --quick
	$(PY) bench/bench_server.py --quick
	$(PY) bench/bench_ui.py --quick
	$(PY) bench/bench_diff.py --quick

clean:
	rm -rf $(VENV) node_modules build dist *.egg-info test-artifacts
