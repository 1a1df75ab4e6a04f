"""cffi build of the C core: `pip install .` runs it (setup.py's cffi_modules); `make asan` runs it
directly with KMEMSIM_SANITIZE=1 into a separate directory."""
import os
import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
SANITIZE = bool(os.environ.get("KMEMSIM_SANITIZE"))


def builder(root: str = "") -> FFI:
    """Sources relative to the project root for setuptools (it refuses absolute paths), or under
    `root` when cffi compiles on its own (it changes into its build directory)."""
    text = (HERE / "kmemsim.h").read_text()
    ffi = FFI()
    ffi.cdef(text.split("#include <stdint.h>", 1)[1].rsplit("#endif", 1)[0])
    # -fvect-cost-model=cheap: -O2's default ("very cheap") leaves the page-cache fills of a large
    # folio (512 slots) unvectorized because their length is not a constant
    flags = ["-O2", "-fvect-cost-model=cheap", "-std=gnu11", "-Wall", "-Wno-unused-function"]
    if SANITIZE:
        flags = ["-O1", "-g", "-std=gnu11", "-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    ffi.set_source(
        "kmemsim._core",
        '#include "kmemsim.h"',
        sources=[os.path.join(root, "c_ext", p.name) for p in sorted(HERE.glob("*.c"))],
        include_dirs=[os.path.join(root, "c_ext")],
        extra_compile_args=flags,
        extra_link_args=["-fsanitize=address,undefined"] if SANITIZE else [],
    )
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    os.makedirs(out, exist_ok=True)
    builder(str(HERE.parent)).compile(tmpdir=out, verbose=False)
