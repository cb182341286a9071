# Heap taken by the firmware's code itself (figure 2c), under MicroPython.
#
#   MICROPYPATH=.frozen:MPY_DIR:MPY_DIR/lib micropython mp_code_heap.py [MODULE ...]
#
# MPY_DIR is the firmware compiled to .mpy (host_tools.procmesh.nodeproc.build_mpy),
# as `snakemesh deploy` puts it on a board running stock MicroPython, where
# importing a .mpy copies its bytecode, constants and qstrs into the heap
# and creates a raw-code and a function object per function.
# With the firmware frozen into the interpreter (MICROPYPATH=.frozen, `make
# mp32-frozen`) the same imports cost only the objects made at import time
# (module dicts, function and class objects); bytecode stays in the image.
# Imports the modules a running Wi-Fi + BLE node holds (default list below, the
# order the node imports them) and prints one JSON line: gc.mem_alloc()
# growth (after gc.collect()) for the whole set, the growth per module (an
# approximation: a module that makes the qstr pool grow is charged for the
# whole new pool block), and the modules loaded.
import gc
import json
import sys

# leaves first, so each increment is mostly the module's own. Not here: what
# a running node has dropped again (snake.runtime.boot, config, profile) or loads only
# for a console command (snake.runtime.cmds, probing) or a signature (ed25519,
# sha512: snake/crypto.py): docs/reports/MEMORY.md
MODULES = ["asyncio", "snake.platform", "snake.crypto", "snake.wire",
           "snake.tables", "snake.telemetry", "snake.tree", "snake.snek",
           "snake.router", "snake.runtime.link", "snake.runtime.stream", "snake.runtime.probe", "snake.runtime.console",
           "snake.runtime.wifi", "snake.runtime.ble", "snake.runtime.node"]


def alloc():
    gc.collect()
    return gc.mem_alloc()


def main(names):
    before = set(sys.modules)
    base = alloc()
    prev = base
    per = {}
    for name in names:
        __import__(name)
        a = alloc()
        per[name] = a - prev
        prev = a
    loaded = sorted(set(sys.modules) - before)
    print(json.dumps({"code_heap": prev - base, "per_module": per, "modules": loaded}))


main(sys.argv[1:] or MODULES)
