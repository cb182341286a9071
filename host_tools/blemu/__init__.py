"""Bluetooth LE emulation for host runs of the firmware.

- `bluetooth.py`: a module named `bluetooth` implementing the subset of
  MicroPython's `bluetooth` API that firmware/snake/runtime/ble.py uses. Put this
  folder on MICROPYPATH (unix port) or sys.path (CPython) of an emulated node
  only; it must never shadow a real `bluetooth` module on a board.
- `medium.py`: the radio medium (CPython process) the emulated radios connect
  to; it decides who is in range (topology file) and applies MTU, latency,
  throughput and loss.
- `_blemu_proto.py`: the message format shared by the two (no CPython-only
  code); the medium's server loop and command line are host_tools/radiomedium.py,
  shared with the ESP-NOW medium.

See docs/reference/BLE.md.
"""
import os

BLEMU_DIR = os.path.dirname(os.path.abspath(__file__))
