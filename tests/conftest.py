import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in ("firmware", "lib", os.path.join("tests", "firmware")):
    full = os.path.join(ROOT, p)
    if full not in sys.path:
        sys.path.insert(0, full)
