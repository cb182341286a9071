# Frozen-module manifest of a custom MicroPython image of snakemesh on
# ESP32_GENERIC: the ESP32 boards share one body (boards/esp32_manifest.py).
#   make firmware-image BOARD=ESP32_GENERIC   (with IDF_PATH and MICROPY_DIR set)
include("../esp32_manifest.py")
