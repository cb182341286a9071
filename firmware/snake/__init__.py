"""snakemesh firmware, in layers; imports point one way: core <- runtime <- cold.

snake.*          the sans-I/O core: codec, tables, tree, SNEK, router, crypto,
                 counters, board profile, platform (no sockets, no asyncio).
snake.runtime.*  the asyncio runtime and its ports (node, links, Wi-Fi, BLE,
                 console, probes, config); imports the core, never the reverse.
Cold halves (boot, cmds, probing, ble_cold, report, crypto_backends) import
hot code; hot code names them only as strings for platform.cold().
Host-only code is the sibling package snakehost, which no board freezes.
"""
