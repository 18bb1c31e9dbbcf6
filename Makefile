# Two commands matter: `make demo` and `make test`. Both set up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test bench system-tools clean

venv: $(STAMP) system-tools

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

# tshark (which brings dumpcap) and chromium come from Debian; install them where missing.
system-tools:
	@if ! command -v tshark >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing tshark from Debian packages"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >/dev/null; \
	  else \
	    echo "tshark is missing: run 'sudo apt-get install tshark' (tests that compare with tshark will skip)"; \
	  fi; \
	fi
	@# headless Chromium renders report.html in tests/test_html_browser.py
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium from Debian packages"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "chromium is missing: run 'sudo apt-get install chromium' (the browser test of report.html will skip)"; \
	  fi; \
	fi

# each bundled capture is its own incident: one report folder per capture
demo: venv
	@set -e; for capture in captures/*.pcap captures/*.pcapng; do \
	  name=$$(basename "$$capture"); name=$${name%%.*}; \
	  echo "== $$capture"; \
	  $(BIN)/detector analyze "$$capture" -o "reports/$$name"; \
	done
	@echo "findings written to reports/*/findings.json; open reports/*/report.html (one self-contained page each)"

test: venv
	$(BIN)/python -m pytest -q tests

# the benchmark reads peak memory and CPU time from GNU time (Debian package `time`)
bench: venv
	@if [ ! -x /usr/bin/time ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null; \
	fi
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) reports bench/out
