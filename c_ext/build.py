"""cffi build of the C core: `pip install .` runs it (setup.py's cffi_modules); `make asan` runs it
directly with KMEMSIM_SANITIZE=1 into a separate directory."""
import os
import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
SOURCES = sorted(str(p.relative_to(HERE.parent)) for p in HERE.glob("*.c"))


def _cdef():
    text = (HERE / "kmemsim.h").read_text()
    body = text.split("#include <stdint.h>", 1)[1].rsplit("#endif", 1)[0]
    return body


ffibuilder = FFI()
ffibuilder.cdef(_cdef())
_flags = ["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function"]
if os.environ.get("KMEMSIM_SANITIZE"):
    _flags = ["-O1", "-g", "-std=gnu11", "-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
ffibuilder.set_source(
    "kmemsim._core",
    '#include "kmemsim.h"',
    sources=SOURCES,                      # relative to the project root: setuptools refuses absolute paths
    include_dirs=["c_ext"],
    extra_compile_args=_flags,
    extra_link_args=["-fsanitize=address,undefined"] if os.environ.get("KMEMSIM_SANITIZE") else [],
)

if __name__ == "__main__":
    os.chdir(HERE.parent)
    out = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    ffibuilder.compile(tmpdir=out, verbose=False)
