# Two commands matter: `make demo` and `make test`. Both set up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The benchmark's Python peers (scapy, dpkt, nfstream) live in a venv of their
# own: their dependencies (cffi, which numba then loads at start-up) must not
# slow down the detector being measured, which runs as a user would install it.
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed
# Byte-compile the package as a regular (non-editable) install does: where
# PYTHONDONTWRITEBYTECODE is set, an editable install would otherwise compile
# every module from source at every start (tens of milliseconds a run).
BYTECODE = $(BIN)/python -m compileall -q detector

# Compile the packet kernels for this machine now, not in the user's first command: the first command
# compiles every declared kernel for its declared signatures (detector.warmup), and those are all that
# analyze and flows call (tests/test_first_run.py), so the smallest command does it; no analysis needed.
WARM_UP = @echo "compiling the packet kernels for this machine (once, up to a minute)"; \
	$(BIN)/detector info captures/rip-scan.pcap >/dev/null 2>&1 \
	  || { echo "warm-up failed: run '$(BIN)/detector info captures/rip-scan.pcap' to see why"; exit 1; }

.PHONY: venv demo lint test bench mutation mutation-decode mutation-detectors system-tools clean

venv: $(STAMP) system-tools

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dask]'
	$(BYTECODE)
	$(WARM_UP)
	touch $(STAMP)

# Debian package $(1) providing command $(2): installed where missing when we
# are root, otherwise a hint saying what skips without it ($(3)).
define ensure_tool
	@if ! command -v $(2) >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $(1) from Debian packages"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
	  else \
	    echo "$(2) is missing: run 'sudo apt-get install $(1)' ($(3))"; \
	  fi; \
	fi
endef

# tshark brings dumpcap (detector watch captures through it) and dissects the cited frames of a report
# (Wireshark's view, detector/report/dissect.py); headless chromium renders report.html in
# tests/test_html_browser.py; tcpreplay sends captures into the veth pair of tests/test_watch.py and bench/watch.py
system-tools:
	$(call ensure_tool,tshark,tshark,reports leave Wireshark's view out and tests that compare with tshark will skip)
	$(call ensure_tool,chromium,chromium,the browser test of report.html will skip)
	$(call ensure_tool,tcpreplay,tcpreplay,the live tests of detector watch and its benchmark will skip)

# each bundled capture is its own incident: one report folder per capture, read with the site file that
# describes its network where one lies beside it (captures/NAME.site.yaml)
demo: venv
	@set -e; for capture in captures/*.pcap captures/*.pcapng; do \
	  name=$$(basename "$$capture"); name=$${name%%.*}; site="captures/$$name.site.yaml"; \
	  if [ -f "$$site" ]; then \
	    echo "== $$capture (site file $$site)"; \
	    $(BIN)/detector analyze "$$capture" -o "reports/$$name" --site "$$site"; \
	  else \
	    echo "== $$capture"; \
	    $(BIN)/detector analyze "$$capture" -o "reports/$$name"; \
	  fi; \
	done
	@echo "findings written to reports/*/findings.json; open reports/*/report.html (one self-contained page each)"

# the lint first: the rules of .ci/ruff.toml, with the ruff the test extra pins
lint: venv
	$(BIN)/ruff check --config .ci/ruff.toml --no-cache detector tests bench captures docs

# one worker per core; a test file stays on one worker (its module fixtures and files are built once)
test: venv lint
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=40 tests

# the benchmark reads peak memory and CPU time from GNU time (Debian package `time`)
$(PEERS_STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/pip install --quiet '.[bench]'
	touch $(PEERS_STAMP)

bench: venv $(PEERS_STAMP)
	$(call ensure_tool,time,/usr/bin/time,the benchmark cannot measure peak memory)
	$(BYTECODE)
	$(BIN)/python bench/run.py --memory-check
	$(BIN)/python bench/watch.py
	$(BIN)/python bench/cluster.py

# Mutation testing (tests/mutation/focus.py says what is mutated): each session mutates a copy of the tree, never this one,
# so an interrupted run leaves no mutant behind; the two sessions run side by side, one per core.
MUTATION := .mutation
MUTATION_STAMP := $(VENV)/.mutation-installed

$(MUTATION_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,mutation]'
	touch $(MUTATION_STAMP)

mutation: venv $(MUTATION_STAMP)
	$(MAKE) -j2 mutation-decode mutation-detectors; status=$$?; \
	  for session in decode detectors; do \
	    (cd $(MUTATION)/$$session && $(abspath $(BIN))/python tests/mutation/focus.py report ../$$session.sqlite) \
	      || status=1; \
	  done; exit $$status

mutation-decode mutation-detectors: mutation-%: $(MUTATION_STAMP)
	rm -rf $(MUTATION)/$* && mkdir -p $(MUTATION)/$*
	git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t $(MUTATION)/$*
	ln -sfn $(abspath ..)/shared $(MUTATION)/shared
	cd $(MUTATION)/$* && PATH=$(abspath $(BIN)):$$PATH sh -c '\
	  cosmic-ray init tests/mutation/$*.toml ../$*.sqlite --force && \
	  python tests/mutation/focus.py filter ../$*.sqlite tests/mutation/$*.toml && \
	  cosmic-ray baseline tests/mutation/$*.toml && \
	  cosmic-ray exec tests/mutation/$*.toml ../$*.sqlite'

clean:
	rm -rf $(VENV) $(PEERS_VENV) $(MUTATION) reports bench/out
