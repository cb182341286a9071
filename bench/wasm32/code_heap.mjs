// Cross-check of figure 2c on a 32-bit MicroPython: the webassembly port
// (4-byte pointers, like an ESP32) imports the same .mpy build and reports
// the heap its code takes. Not part of `make bench` (needs Node.js and npm):
//
//   .venv/bin/python -c "from host_tools.nodeproc import build_mpy; build_mpy('/tmp/mpy')"
//   mkdir -p /tmp/mpwasm && cd /tmp/mpwasm && \
//     npm install @micropython/micropython-webassembly-pyscript@1.29.0-6
//   NODE_PATH=/tmp/mpwasm/node_modules node --experimental-default-type=module \
//     bench/wasm32/code_heap.mjs /tmp/mpy
//
// Prints the JSON line of bench/figures/mp_code_heap.py. The port has no
// os.urandom; a stand-in (zeros) is installed before the firmware imports.
import fs from "fs";
import path from "path";
import { createRequire } from "module";

const require = createRequire(path.join(process.env.NODE_PATH || process.cwd(), "x.js"));
const pkg = require.resolve("@micropython/micropython-webassembly-pyscript/micropython.mjs");
const { loadMicroPython } = await import(pkg);
const mpyDir = process.argv[2];
if (!mpyDir || !fs.existsSync(path.join(mpyDir, "snake"))) {
  console.error("usage: code_heap.mjs MPY_DIR (the output of build_mpy)");
  process.exit(2);
}
const here = path.dirname(new URL(import.meta.url).pathname);
const measure = fs.readFileSync(path.join(here, "..", "figures", "mp_code_heap.py"), "utf8");
const mp = await loadMicroPython({ heapsize: 1 << 20, stdout: (l) => console.log(l),
                                   stderr: (l) => console.error(l) });
function copyDir(src, dst) {
  try { mp.FS.mkdir(dst); } catch (e) { /* exists */ }
  for (const n of fs.readdirSync(src)) {
    const p = path.join(src, n);
    if (fs.statSync(p).isDirectory()) copyDir(p, dst + "/" + n);
    else if (n.endsWith(".mpy")) mp.FS.writeFile(dst + "/" + n, fs.readFileSync(p));
  }
}
copyDir(mpyDir, "/fw");
const shim = [
  "import sys, os as _os",
  "sys.path[:0] = ['/fw', '/fw/lib']",
  "class _OS: pass",
  "_o = _OS()",
  "for _k in dir(_os):",
  "    try: setattr(_o, _k, getattr(_os, _k))",
  "    except Exception: pass",
  "_o.urandom = lambda n: bytes(n)",
  "sys.modules['os'] = _o",
  "",
].join("\n");
mp.runPython(shim + measure);
