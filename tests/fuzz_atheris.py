"""Coverage-guided fuzzing (atheris, libFuzzer) of the GGUF and trace parsers, for `make fuzz`:

    python tests/fuzz_atheris.py gguf  [libFuzzer options, e.g. -max_total_time=60]
    python tests/fuzz_atheris.py trace [...]

Each input is written to a file and read as kmemsim reads it (gguf: gguf_layout.read_layout, the
header and metadata checked; trace: libcachesim_io.load_any, a Parquet trace, an oracleGeneral
binary or a csv by its content, then replayed when small). An InputError is the expected answer
to bad input; any other exception, a crash in the C core or a hang (libFuzzer's -timeout) is a
finding, and libFuzzer saves the input that caused it. Seeds are the corpus's good files
(tests/hardening/inputs.py), so mutations start from inputs that get deep. Not collected by pytest:
test_fuzz.py is the bounded harness the suite runs."""
import os
import sys
import tempfile

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports(include=["kmemsim"]):
    from kmemsim.core.errors import InputError
    from kmemsim.engine.kernel import Config, Emulator, core_bytes, ffi
    from kmemsim.workload import gguf_layout, libcachesim_io

from hardening import inputs as I  # noqa: E402  (after sys.path: the seeds' writer)

TARGETS = ("gguf", "trace")


def seeds(target: str, d: str) -> None:
    if target == "gguf":
        kv, ts = I.shape(layers=1)
        I.write_gguf(os.path.join(d, "ok.gguf"), kv, ts)
        with open(os.path.join(d, "header.gguf"), "wb") as f:
            f.write(I.gguf_bytes(kv, ts, data=False))
    else:
        I.write_trace(os.path.join(d, "ok.parquet"), I.ok_rows(8))
        libcachesim_io.write_oracle_general(os.path.join(d, "ids.bin"), [1, 2, 3, 1, 2, 9])
        libcachesim_io.write_csv_ids(os.path.join(d, "ids.csv"), [5, 6, 5, 7])


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(TARGETS)} [libFuzzer options] [corpus dirs]")
    target = sys.argv.pop(1)
    work = tempfile.mkdtemp(prefix="kmemsim-fuzz-")
    corpus = os.path.join(work, "corpus")
    os.mkdir(corpus)
    seeds(target, corpus)
    path = os.path.join(work, "input.gguf" if target == "gguf" else "input")

    def one(data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)
        try:
            if target == "gguf":
                gguf_layout.read_layout(path)
            else:
                tr = libcachesim_io.load_any(path)
                cfg = Config(mem="64M", zram="lz4:16M")
                # replayed when small: within libFuzzer's -rss_limit_mb (the emulator's own check
                # allows what this machine has, more than a fuzzing run wants to spend)
                if len(tr) <= 10_000 and core_bytes(tr, tr.meta.get("files", []), cfg.to_c(ffi)) < 256 << 20:
                    Emulator(cfg).replay(tr, check_invariants=True)
        except InputError:
            pass

    argv = sys.argv + ([corpus] if not any(not a.startswith("-") for a in sys.argv[1:]) else [])
    if not any(a.startswith("-artifact_prefix=") for a in argv):
        argv.append(f"-artifact_prefix={work}/")         # a finding's input, kept out of the checkout
    atheris.Setup(argv, one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
