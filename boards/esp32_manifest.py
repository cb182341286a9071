# The body of the ESP32 boards' frozen-module manifests (ESP32_GENERIC,
# _S3, _C3: each board's manifest.py includes this file; see
# boards/README.md). Build an image with ESP-IDF:
#   make firmware-image BOARD=ESP32_GENERIC   (with IDF_PATH and MICROPY_DIR set)
# The port's stock manifest (asyncio, ...) stays; snakemesh is frozen on top,
# so its bytecode runs from flash instead of taking heap. Only the package a
# board runs is frozen (snake and snake.runtime), not the host-only snakehost.
#
# The same body builds the 32-bit unix-port emulator of a board's
# interpreter (`make mp32-frozen`, SNAKEMESH_PORT=unix): that port has no
# boards/manifest.py, so asyncio (what the ESP32 port's manifest freezes that
# the node uses) is included explicitly instead, and so are the emulated
# `bluetooth` and `espnow` modules (host_tools/blemu, host_tools/espnowemu),
# which stand in for the board's built-in C modules: their code belongs in
# the image, not in the heap.
import os

_ROOT = os.environ["SNAKEMESH_ROOT"]  # set by the Makefile: the checkout

if os.environ.get("SNAKEMESH_PORT") == "unix":
    include("$(MPY_DIR)/extmod/asyncio")
    module("bluetooth.py", base_path=_ROOT + "/host_tools/blemu")
    module("_blemu_proto.py", base_path=_ROOT + "/host_tools/blemu")
    module("espnow.py", base_path=_ROOT + "/host_tools/espnowemu")
    module("aioespnow.py", base_path=_ROOT + "/host_tools/espnowemu")
else:
    include("$(PORT_DIR)/boards/manifest.py")
package("snake", base_path=_ROOT + "/firmware")
module("sha512.py", base_path=_ROOT + "/lib")
module("ed25519.py", base_path=_ROOT + "/lib")
module("main.py", base_path=_ROOT + "/firmware")
