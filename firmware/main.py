# snakemesh firmware entry point.
#
# On a board: /main.py runs at boot; reads /profile.json, /key.bin and
# /config.json (snake/runtime/config.py) and serves the console on USB serial.
# On the unix port:
#   MICROPYPATH=firmware:lib micropython firmware/main.py --key-file K [options]
# (`snakemesh node` does this; options in snake/runtime/config.py).
import sys

try:
    import gc
    gc.collect()
    _heap0 = gc.mem_alloc()     # before the firmware: console `mem` counts from here
except AttributeError:          # CPython
    _heap0 = None

try:
    from snake.runtime import node
except MemoryError:
    # the heap cannot even hold the firmware's bytecode (docs/reports/MEMORY.md)
    print("snakemesh: error: out of memory loading the firmware")
    sys.exit(3)

rc = node.main(sys.argv[1:] if len(sys.argv) > 1 else [], heap0=_heap0)
if rc:
    sys.exit(rc)     # unix port: the exit status; a board drops to the REPL
