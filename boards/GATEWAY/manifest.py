# The unix port needs no image: `snakemesh node` runs firmware/main.py with
# MICROPYPATH set to firmware/ and lib/. This manifest exists for users who
# build their own unix micropython with snakemesh frozen in:
#   make -C $MICROPY_DIR/ports/unix FROZEN_MANIFEST=$PWD/boards/GATEWAY/manifest.py
import os as _os
_ROOT = _os.environ["SNAKEMESH_ROOT"]  # the checkout
include("$(PORT_DIR)/variants/manifest.py")
package("snake", base_path=_ROOT + "/firmware")
module("sha512.py", base_path=_ROOT + "/lib")
module("ed25519.py", base_path=_ROOT + "/lib")
