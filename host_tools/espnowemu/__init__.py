"""ESP-NOW emulation for host runs of the firmware.

- `espnow.py`: a module named `espnow` implementing MicroPython's documented
  ESP32 `espnow` API (the subset snake's ESP-NOW port uses, and the rest of
  the peer/receive API for tests). Put this folder on MICROPYPATH (unix port)
  or sys.path (CPython) of an emulated node only; it must never shadow the
  C module on a board.
- `aioespnow.py`: the documented asyncio wrapper (AIOESPNow).
- `medium.py`: the radio medium (CPython process) the emulated radios
  connect to: who hears whom (`@espnow` topology edges), channel, loss,
  airtime and latency, the radio-level ack; its server loop and command
  line are host_tools/radiomedium.py, shared with the BLE medium.

See docs/reference/ESPNOW.md.
"""
import os

ESPNOWEMU_DIR = os.path.dirname(os.path.abspath(__file__))
