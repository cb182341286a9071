import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bench/ holds the scenario helpers tests share with `make bench`
# (heap_scenario, fakepeer, telemetry_synth)
for p in ("firmware", "lib", os.path.join("tests", "firmware"), "bench"):
    full = os.path.join(ROOT, p)
    if full not in sys.path:
        sys.path.insert(0, full)
