# Frozen-module manifest for a custom MicroPython image of snakemesh on
# ESP32_GENERIC_S3 (see boards/README.md). Build it with ESP-IDF:
#   make firmware-image BOARD=ESP32_GENERIC_S3   (with IDF_PATH and MICROPY_DIR set)
# The port's stock manifest (asyncio, ...) stays; snakemesh is frozen on top,
# so its bytecode runs from flash instead of taking heap.
import os

_ROOT = os.environ["SNAKEMESH_ROOT"]  # set by the Makefile: the checkout

include("$(PORT_DIR)/boards/manifest.py")
package("snake", base_path=_ROOT + "/firmware")
module("sha512.py", base_path=_ROOT + "/lib")
module("ed25519.py", base_path=_ROOT + "/lib")
module("main.py", base_path=_ROOT + "/firmware")
