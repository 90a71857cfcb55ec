# `make demo` and `make test` are all a newcomer needs: each creates or reuses .venv
# and installs what it needs (torch 2.13.0 CPU, the package, test tools).
PYTHON ?= python3
SUDO := $(shell command -v sudo 2>/dev/null)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.trnscope-installed

.PHONY: demo test test-load install browser compiler bench clean check

$(STAMP): pyproject.toml | compiler
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	# the device's C++ core (src/trnscope/device/csrc), built now rather than at the first import; a
	# machine that cannot build it is told why once and keeps the Python path
	$(PY) -c "from trnscope.device import _core; print(_core.report())"
	touch $(STAMP)

# Debian's g++ for the device's C++ core (ninja comes from PyPI, pinned in pyproject.toml)
compiler:
	@command -v g++ >/dev/null || { 	  echo "installing g++ for trnscope's C++ core (apt-get)"; 	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null) || 	  $(SUDO) sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null'; }

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/trnscope demo

# Debian's Chromium for the explorer's end-to-end tests (Playwright drives /usr/bin/chromium)
browser:
	@test -x /usr/bin/chromium || { \
	  echo "installing Chromium for the browser tests (apt-get)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  $(SUDO) sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null'; }

# the lint and type gates (ruff and mypy, pinned in pyproject.toml's test extra; the rules and what
# is not gated yet: docs/architecture.md, "Checked types and lint"). mypy keeps its cache in
# .mypy_cache: about 30 s of CPU cold, a few seconds after.
check: $(STAMP)
	$(VENV)/bin/ruff check src/trnscope
	$(VENV)/bin/mypy

test: $(STAMP) browser check
	# one BLAS thread per pytest worker: two workers share the two cores
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 tests

# the suite twice as the machine is and twice with every core kept busy (.ci/load-check)
test-load: $(STAMP) browser
	.ci/load-check

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
