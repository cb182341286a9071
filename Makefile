# snakemesh: two commands do all the set-up on a fresh machine:
#   make test   -> virtual environment, pinned dependencies, every test suite
#   make demo   -> a local mesh of real firmware nodes, telemetry, Spark report
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MICROPYTHON := $(VENV)/bin/micropython
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: all setup test test-fast demo bench soak firmware-image mpy clean help

all: help

help:
	@echo "make test    - create .venv, install pinned deps, run all tests (CPython + micropython)"
	@echo "make demo    - run a local mesh of unix-port firmware nodes and write a report"
	@echo "make bench   - benchmarks (speed, memory, protocol cost) -> bench/results.json"
	@echo "make soak    - long-running 8-node mesh under a 110K heap"
	@echo "make firmware-image BOARD=ESP32_GENERIC - custom image with frozen modules (needs ESP-IDF)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,pipeline]'
	@touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/snakemesh demo --out demo-out

bench: $(STAMP)
	$(PY) bench/run.py

soak: $(STAMP)
	$(PY) -m host_tools.soak

mpy: $(STAMP)
	$(VENV)/bin/snakemesh build-mpy --board ESP32_GENERIC --out build/mpy

# A custom image with the firmware frozen in needs ESP-IDF and the
# MicroPython source tree; neither can be installed from a package registry.
firmware-image:
	@if [ -z "$$IDF_PATH" ] || [ -z "$$MICROPY_DIR" ]; then \
	  echo "firmware-image: ESP-IDF not found (set IDF_PATH and MICROPY_DIR, see boards/README.md)."; \
	  echo "Without it, flash stock MicroPython and use 'snakemesh deploy'."; exit 2; fi
	SNAKEMESH_ROOT=$(CURDIR) $(MAKE) -C $$MICROPY_DIR/ports/esp32 BOARD=$${BOARD:-ESP32_GENERIC} \
	  FROZEN_MANIFEST=$(CURDIR)/boards/$${BOARD:-ESP32_GENERIC}/manifest.py

clean:
	rm -rf build out demo-out bench/results.json .pytest_cache
