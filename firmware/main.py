# snakemesh firmware entry point.
#
# On a board: /main.py runs at boot; reads /profile.json, /key.bin and
# /config.json (snake/config.py) and serves the console on USB serial.
# On the unix port:
#   MICROPYPATH=firmware:lib micropython firmware/main.py --key-file K [options]
# (`snakemesh node` does this; options in snake/config.py).
import sys

from snake import node

node.main(sys.argv[1:] if len(sys.argv) > 1 else [])
