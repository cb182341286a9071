# snakemesh: two commands do all the set-up on a fresh machine:
#   make test   -> virtual environment, pinned dependencies, every test suite
#   make demo   -> a local mesh of real firmware nodes, telemetry, Spark report
# and `make check` is the fast tier while you work (unit and firmware suites).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MICROPYTHON := $(VENV)/bin/micropython
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
BENCH_ARGS ?=
# the one way to install a Debian package the build needs (skips apt when it
# is there, waits for another apt's lock): $(APT_INSTALL) "why" package...
APT_INSTALL := $(CURDIR)/scripts/apt-install

.PHONY: all setup test check demo bench bench-full soak firmware-image mpy clean help mp32 mp32-frozen mp32-stock mp32-deps chromium mosquitto

all: help

help:
	@echo "make test    - create .venv, install pinned deps, run all tests (CPython + micropython)"
	@echo "make check   - the fast tier: unit and firmware suites, no node processes, Spark or"
	@echo "               long simulations (a few minutes; tests marked slow are left to make test)"
	@echo "make demo    - run a local mesh of unix-port firmware nodes and write a report"
	@echo "make bench   - every benchmark figure, heavy ones on smaller cases (~20 min) -> bench/results.json"
	@echo "make bench-full - the same with the heavy cases at full size (1,000-node sims; an hour or more)"
	@echo "               (BENCH_ARGS passes options to bench/run.py, e.g. BENCH_ARGS='--only 4,7')"
	@echo "make soak    - 8-node mesh, 10 min, kill -9 every minute, 110K heap, 32-bit frozen build"
	@echo "make firmware-image BOARD=ESP32_GENERIC - custom image with the firmware frozen in (needs ESP-IDF: docs/guides/FIRST_BOARD.md)"
	@echo "make mp32    - 32-bit MicroPython $(MICROPY_VERSION) unix ports (an ESP32's word size):"
	@echo "               $(MP32_FROZEN) (firmware frozen by boards/ESP32_GENERIC/manifest.py)"
	@echo "               $(MP32_STOCK) (stock-like: only asyncio frozen, firmware as .mpy)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,pipeline]'
	@touch $(STAMP)

setup: $(STAMP)

test: $(STAMP) mp32 chromium mosquitto
	$(PY) -m pytest $(PYTEST_ARGS)

# The fast tier: what runs without node processes, a JVM, a browser or a long
# simulation (tests marked `slow`, pyproject.toml). Needs no 32-bit build.
check: $(STAMP)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# Headless Chromium renders the report in tests/host/test_report.py (Debian package)
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  $(APT_INSTALL) "the headless browser for the report's screenshot test" chromium

# The MQTT broker the gateway tests start on a loopback port with a config
# file of their own (tests/host/test_gateway_mqtt.py), never as a service
mosquitto:
	@command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto || \
	  $(APT_INSTALL) "the MQTT broker for the gateway's bridge tests" mosquitto

demo: $(STAMP)
	$(VENV)/bin/snakemesh demo --out demo-out

bench: $(STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

bench-full: $(STAMP)
	$(PY) bench/run.py --full $(BENCH_ARGS)

# the 32-bit build with the firmware frozen in, an ESP32's 110K heap;
# SOAK_ARGS passes more options (--minutes, --heapsize, --micropython, --mpy)
SOAK_ARGS ?=
soak: $(STAMP) mp32-frozen
	$(PY) -m host_tools.procmesh.soak --micropython $(MP32_FROZEN) --heapsize 110K $(SOAK_ARGS)

mpy: $(STAMP)
	$(VENV)/bin/snakemesh build-mpy --board ESP32_GENERIC --out build/mpy

# A custom image with the firmware frozen in needs ESP-IDF and the
# MicroPython source tree; neither can be installed from a package registry.
# What to install and every step after the build: docs/guides/FIRST_BOARD.md.
# The message when they are missing never sends a plain ESP32 back to stock
# MicroPython + deploy: that is the path deploy refuses for it.
ESP_IDF_VERSION := v5.4.2
FW_BOARD = $(or $(BOARD),ESP32_GENERIC)
firmware-image:
	@case "$(FW_BOARD)" in ESP32*) test -f boards/$(FW_BOARD)/manifest.py;; *) false;; esac || { \
	  if [ "$(FW_BOARD)" = ESP32_SPIRAM ]; then \
	    echo "firmware-image: ESP32_SPIRAM has no custom image: flash MicroPython's stock ESP32_GENERIC-SPIRAM image and run 'snakemesh deploy --board ESP32_SPIRAM' (docs/guides/FIRST_BOARD.md)."; \
	  else echo "firmware-image: no ESP32 image for $(FW_BOARD): BOARD is one of $$(cd boards && ls -d ESP32*/manifest.py | sed 's,/manifest.py,,' | tr '\n' ' ')"; fi; \
	  exit 2; }
	@if [ -z "$$IDF_PATH" ] || [ -z "$$MICROPY_DIR" ] || [ ! -d "$$MICROPY_DIR/ports/esp32" ]; then \
	  echo "firmware-image: the $(FW_BOARD) image needs ESP-IDF $(ESP_IDF_VERSION) and a MicroPython $(MICROPY_VERSION) source tree:"; \
	  echo "  IDF_PATH    the ESP-IDF checkout, set by '. \$$IDF_PATH/export.sh' (now: $${IDF_PATH:-not set})"; \
	  echo "  MICROPY_DIR the MicroPython checkout (git clone -b v$(MICROPY_VERSION)), with ports/esp32 (now: $${MICROPY_DIR:-not set})"; \
	  echo "Install both and build: docs/guides/FIRST_BOARD.md, section \"A custom image\"."; \
	  case "$(FW_BOARD)" in \
	    ESP32_GENERIC) echo "A plain ESP32 needs this image: the firmware as .mpy on stock MicroPython does not fit its heap.";; \
	    *) echo "Stock MicroPython + 'snakemesh deploy --board $(FW_BOARD)' also runs it when the board's free heap holds the firmware as .mpy (deploy checks first); this image leaves more free.";; \
	  esac; exit 2; fi
	SNAKEMESH_ROOT=$(CURDIR) $(MAKE) -C $$MICROPY_DIR/ports/esp32 BOARD=$(FW_BOARD) \
	  FROZEN_MANIFEST=$(CURDIR)/boards/$(FW_BOARD)/manifest.py
	@echo "firmware-image: $$MICROPY_DIR/ports/esp32/build-$(FW_BOARD)/firmware.bin; next: snakemesh flash --board $(FW_BOARD) --firmware that file --erase (docs/guides/FIRST_BOARD.md)"

# ---- 32-bit MicroPython unix ports: the ESP32's interpreter on this host ----
# Built from the pinned source archive (MICROPY_SRC; a clean clone finds it
# in ../shared/vendor, a git worktree in ../../shared/vendor), cached under
# build/mp32. Two variants (docs/reports/MEMORY.md):
#   $(MP32_FROZEN)  the firmware frozen in through the SAME manifest that
#                   `make firmware-image` gives ESP-IDF (boards/ESP32_GENERIC);
#                   rebuilt whenever firmware/, lib/ or the manifest change
#   $(MP32_STOCK)   stock-like: only asyncio frozen, as on stock board
#                   firmware; the node's code is imported as .mpy
# Both also freeze the emulated `bluetooth` and `espnow` modules
# (host_tools/blemu, host_tools/espnowemu): they stand in for the C modules
# a board has built in, so their code must not count as heap the board
# would spend.
# Run a node on one: snakemesh node --micropython build/mp32/micropython-frozen
MICROPY_VERSION := 1.28.0
MICROPY_ARCHIVE := micropython-$(MICROPY_VERSION)-unix-src.tar.gz
MICROPY_SRC ?= $(firstword $(wildcard $(CURDIR)/../shared/vendor/$(MICROPY_ARCHIVE) \
                 $(CURDIR)/../../shared/vendor/$(MICROPY_ARCHIVE)) $(CURDIR)/../shared/vendor/$(MICROPY_ARCHIVE))
MP32_DIR := build/mp32
MP32_TREE := $(MP32_DIR)/micropython-$(MICROPY_VERSION)
MP32_FROZEN := $(MP32_DIR)/micropython-frozen
MP32_STOCK := $(MP32_DIR)/micropython-stock
MP32_MPY_CROSS := $(MP32_TREE)/mpy-cross/build/mpy-cross
MP32_FLAGS := VARIANT=standard MICROPY_FORCE_32BIT=1 MICROPY_PY_FFI=0 MICROPY_PY_BTREE=0 \
              MICROPY_PY_SSL=0 MICROPY_SSL_MBEDTLS=0 CFLAGS_EXTRA=-DMICROPY_PY_CRYPTOLIB=0
MP32_JOBS ?= -j2
FW_SOURCES := $(wildcard firmware/*.py firmware/snake/*.py firmware/snake/runtime/*.py lib/*.py host_tools/blemu/bluetooth.py host_tools/blemu/_blemu_proto.py host_tools/espnowemu/espnow.py host_tools/espnowemu/aioespnow.py) boards/ESP32_GENERIC/manifest.py boards/esp32_manifest.py

mp32: mp32-frozen mp32-stock
mp32-frozen: $(MP32_FROZEN)
mp32-stock: $(MP32_STOCK)

# gcc-multilib (Debian) gives gcc -m32 its headers and libraries
mp32-deps:
	@echo 'int main(void){return 0;}' | $(CC) -m32 -x c - -o /dev/null 2>/dev/null || \
	  $(APT_INSTALL) "32-bit build of MicroPython" gcc-multilib

$(MP32_TREE)/.unpacked:
	@test -f "$(MICROPY_SRC)" || { echo "mp32: MicroPython source archive not found: $(MICROPY_SRC) (set MICROPY_SRC=/path/to/$(MICROPY_ARCHIVE))"; exit 2; }
	mkdir -p $(MP32_DIR)
	tar xzf "$(MICROPY_SRC)" -C $(MP32_DIR)
	@touch $@

$(MP32_MPY_CROSS): $(MP32_TREE)/.unpacked
	$(MAKE) -s -C $(MP32_TREE)/mpy-cross $(MP32_JOBS)

# stock-like: what a stock board image has frozen that the node uses (asyncio),
# plus the emulated `bluetooth` and `espnow` modules standing in for the board's C modules
$(MP32_DIR)/stock-manifest.py: Makefile
	mkdir -p $(MP32_DIR)
	{ echo 'include("$$(MPY_DIR)/extmod/asyncio")'; \
	  echo 'module("bluetooth.py", base_path="$(CURDIR)/host_tools/blemu")'; \
	  echo 'module("_blemu_proto.py", base_path="$(CURDIR)/host_tools/blemu")'; \
	  echo 'module("espnow.py", base_path="$(CURDIR)/host_tools/espnowemu")'; \
	  echo 'module("aioespnow.py", base_path="$(CURDIR)/host_tools/espnowemu")'; } > $@

$(MP32_FROZEN): $(MP32_MPY_CROSS) $(FW_SOURCES) | mp32-deps
	SNAKEMESH_ROOT=$(CURDIR) SNAKEMESH_PORT=unix $(MAKE) -s -C $(MP32_TREE)/ports/unix BUILD=build-32f \
	  $(MP32_FLAGS) FROZEN_MANIFEST=$(CURDIR)/boards/ESP32_GENERIC/manifest.py $(MP32_JOBS)
	cp $(MP32_TREE)/ports/unix/build-32f/micropython $@

$(MP32_STOCK): $(MP32_MPY_CROSS) $(MP32_DIR)/stock-manifest.py host_tools/blemu/bluetooth.py \
               host_tools/blemu/_blemu_proto.py host_tools/espnowemu/espnow.py \
               host_tools/espnowemu/aioespnow.py | mp32-deps
	$(MAKE) -s -C $(MP32_TREE)/ports/unix BUILD=build-32s \
	  $(MP32_FLAGS) FROZEN_MANIFEST=$(CURDIR)/$(MP32_DIR)/stock-manifest.py $(MP32_JOBS)
	cp $(MP32_TREE)/ports/unix/build-32s/micropython $@

clean:
	rm -rf build out demo-out bench/results.json .pytest_cache
