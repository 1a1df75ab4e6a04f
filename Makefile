# kmemsim: every target sets up what it needs. `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
PIP   := $(PY) -m pip --disable-pip-version-check -q

.PHONY: setup setup-core system demo test test-fast asan fuzz bench flash-check bench-record bench-record-pressure validate-grid vm guest-llama validate-grid-6.1 clean

## setup: everything: system packages (apt), the venv, the package with its C core, llama-cpp-python
## (compiled: minutes), the test tools, bcc. The live features, validation and `make test` need it.
setup: $(VENV)/.installed

## setup-core: the venv and the package with its C core only: the emulator, compare, demo, sweep
## (no apt, no llama.cpp compile; `make demo` needs no more)
setup-core: $(VENV)/.core

$(VENV)/.core: pyproject.toml setup.py c_ext/*.c c_ext/*.h c_ext/build.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -U pip setuptools wheel cffi
	$(PIP) install -e .
	touch $@

$(VENV)/.installed: $(VENV)/.core | system
	$(PIP) install -e '.[test,llama]'
	# Debian's bcc (PyPI's "bcc" is an unrelated package): linked into the venv
	ln -sfn /usr/lib/python3/dist-packages/bcc "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/bcc"
	touch $@

## system: apt packages and the kernel-header links bcc needs (root; idempotent)
system:
	@bash .ci/setup-system.sh

demo: setup-core
	$(VENV)/bin/kmemsim demo

test: setup
	$(VENV)/bin/pytest -q -rs tests

## asan: the C core rebuilt with -fsanitize=address,undefined, then the core's tests against it, the
## fuzzing harness's C-core cases included (tests/test_fuzz_core.py: sizes past what can be allocated
## must come back as NULL, which the core turns into an error: allocator_may_return_null)
asan: setup
	rm -rf build/asan && mkdir -p build/asan
	KMEMSIM_SANITIZE=1 $(PY) c_ext/build.py build/asan
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	KMEMSIM_CORE_PATH=build/asan $(VENV)/bin/pytest -q -x -p no:cacheprovider tests/test_core_mechanisms.py tests/test_core_invariants.py tests/test_lmkd.py tests/test_mglru.py tests/test_fuzz_core.py

## fuzz: coverage-guided fuzzing (atheris) of the GGUF and trace parsers, FUZZ_S seconds each, then the
## hypothesis harness at length (FUZZ_EXAMPLES draws per loader); a finding's input is kept and named
FUZZ_S ?= 60
FUZZ_EXAMPLES ?= 1000
fuzz: setup
	for t in gguf trace; do \
	  $(PY) tests/fuzz_atheris.py $$t -max_total_time=$(FUZZ_S) -rss_limit_mb=4096 -timeout=30 || exit 1; \
	done
	KMEMSIM_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VENV)/bin/pytest -q -p no:cacheprovider tests/test_fuzz.py

bench: setup
	$(PY) -m kmemsim.bench.replay

## flash-check: the flash model (a fio sweep's table) against a second fio sweep, point by point (root)
flash-check: setup
	$(PY) -m kmemsim.bench.flash

## bench-record: llama.cpp decode tokens/s bare vs under `kmemsim run` (recorder attached); target <= 3%
bench-record: setup
	$(PY) -m kmemsim.bench.record

## bench-record-pressure: validate's reference run at 40% of a small model, recorded against unrecorded
bench-record-pressure: setup
	$(PY) -m kmemsim.bench.record --pressure 40 --rounds 3

## validate-grid: docs/validation.md's grid: six synthetic model shapes (f16, q8_0, q4_0; few wide layers
## and many narrow ones; 16k-151k vocabularies; one MoE) x GRID_LIMITS, REPEAT live runs each, into
## GRID/out/ (summary.md and plots/times.png over all; root, about 20 minutes on this project's 2-CPU machines)
GRID   ?= build/grid
REPEAT ?= 3
GRID_LIMITS ?= 40%,60%,100%,150%,300%
GRID_MODELS := $(GRID)/models/tiny-f16.gguf $(GRID)/models/llama3.2-1b-q8_0.gguf $(GRID)/models/qwen3-0.6b-q4_0.gguf \
               $(GRID)/models/wide-f16.gguf $(GRID)/models/narrow-q8_0.gguf $(GRID)/models/moe-q4_0.gguf
$(GRID)/models/tiny-f16.gguf: | setup
	mkdir -p $(@D) && $(VENV)/bin/kmemsim model synth $@ --arch llama --layers 4 --dim 768 --ffn 2048 --heads 12 --kv-heads 4 --vocab 32000 --type f16
$(GRID)/models/llama3.2-1b-q8_0.gguf: | setup
	mkdir -p $(@D) && $(VENV)/bin/kmemsim model synth $@ --preset Llama-3.2-1B --type q8_0
$(GRID)/models/qwen3-0.6b-q4_0.gguf: | setup
	mkdir -p $(@D) && $(VENV)/bin/kmemsim model synth $@ --preset Qwen3-0.6B --type q4_0
$(GRID)/models/wide-f16.gguf: | setup
	mkdir -p $(@D) && $(VENV)/bin/kmemsim model synth $@ --arch llama --layers 2 --dim 2048 --ffn 8192 --heads 16 --kv-heads 8 --vocab 16000 --type f16
$(GRID)/models/narrow-q8_0.gguf: | setup
	mkdir -p $(@D) && $(VENV)/bin/kmemsim model synth $@ --arch llama --layers 24 --dim 384 --ffn 1024 --heads 6 --kv-heads 2 --vocab 50000 --type q8_0
$(GRID)/models/moe-q4_0.gguf: | setup
	mkdir -p $(@D) && $(VENV)/bin/kmemsim model synth $@ --arch qwen3moe --layers 8 --dim 1024 --ffn 768 --heads 16 --kv-heads 4 --head-dim 64 --experts 8 --experts-used 2 --vocab 32000 --type q4_0
validate-grid: setup $(GRID_MODELS)
	$(VENV)/bin/kmemsim validate $(GRID_MODELS) --prompt 64 --decode 8 --ctx 512 --mem-limit $(GRID_LIMITS) --repeat $(REPEAT) -o $(GRID)/out

## vm: Debian's 6.1 kernel booted under qemu with this machine's root file system read-only (docs/vm.md),
## VM_CMD run in it as root; one line saying what is missing where it cannot start (exit 2)
VM_CMD ?= sh -c 'uname -r; echo "lru_gen/enabled: $$(cat /sys/kernel/mm/lru_gen/enabled)"'
vm: setup
	$(VENV)/bin/kmemsim vm run -- $(VM_CMD)

## validate-grid-6.1: the validation grid's subset sized for the 6.1 guest under TCG (docs/validation.md,
## "On 6.1"): GRID61_MODELS at GRID61_LIMITS, REPEAT61 live runs each, with the classic lists and with
## MGLRU, each a boot of its own; the models on an ext4 disk (read through the block layer as on a
## phone); predicted with this machine's device profile (times in the guest are TCG's: only counts
## compare). Into GRID61/{classic,mglru}/, resumable (--reuse: a rerun makes only the runs still missing);
## root; some 15 minutes per LRU and model here
GRID61        ?= build/grid-6.1
GRID61_MODELS ?= $(GRID)/models/tiny-f16.gguf
GRID61_LIMITS ?= 40%,80%,120%
REPEAT61      ?= 1
## guest-llama: llama.cpp's libraries for the guest's CPU (TCG: AVX2, no AVX-512), the venv's version
guest-llama: $(VENV)/guest-llama/version
$(VENV)/guest-llama/version: | setup
	bash .ci/build-guest-llama.sh $(VENV) $(VENV)/guest-llama
$(GRID61)/device-profile.toml: | setup
	mkdir -p $(@D) && $(VENV)/bin/kmemsim profile --no-fio -o $@
validate-grid-6.1: setup guest-llama $(GRID61_MODELS) $(GRID61)/device-profile.toml
	$(VENV)/bin/kmemsim vm disk $(GRID61_MODELS) -o $(GRID61)/models.img
	for lru in classic mglru; do \
	  $(VENV)/bin/kmemsim vm run --mem 3G --disk $(GRID61)/models.img:/tmp/models --lru $$lru --rwdir $(GRID61) --no-cwd -- \
	    kmemsim validate $(foreach m,$(GRID61_MODELS),/tmp/models/$(notdir $(m))) --prompt 64 --decode 8 --ctx 512 \
	      --mem-limit $(GRID61_LIMITS) --repeat $(REPEAT61) --reuse --device $(GRID61)/device-profile.toml \
	      -o $(GRID61)/$$lru || exit 1; \
	done

clean:
	rm -rf build $(VENV) *.egg-info kmemsim/_core*.so
