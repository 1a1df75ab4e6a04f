"""The corpus: bad inputs, each with a fragment of the one line `kmemsim: ...` it must give (exit 2,
no traceback, nothing written). Grouped as issue 44 lists them. A case is run in its own empty
directory (`{out}`, also the working directory) that must still be empty after it; `{d}` holds the
inputs make_inputs() wrote. `proc` cases run as a subprocess with a 60 s bound: those that once
crashed the C core or hung (huge sizes, FIFOs, devices, never-ending scenarios, live commands)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from gguf import GGMLQuantizationType as Q, GGUFValueType as VT

from . import inputs as I


@dataclass
class Case:
    id: str
    args: list
    expect: str                  # a fragment of the one stderr line (case-sensitive)
    proc: bool = False           # a subprocess (crash and hang cases), else in-process (CliRunner)
    env: dict = field(default_factory=dict)
    fsize: int | None = None     # a subprocess whose files may not grow past this (a disk that fills)


# ------------------------------------------------------------------------------------------------
# inputs

def make_inputs(d: str) -> None:
    """Every file the cases name, in directory d."""
    j = lambda *p: os.path.join(d, *p)          # noqa: E731
    kv, ts = I.shape()
    I.write_gguf(j("ok.gguf"), kv, ts)
    arch = "llama"

    def g(name, kv=kv, ts=ts, **kw):
        I.write_gguf(j(name), kv, ts, **kw)

    def k(key, vt, v):
        return I.replace_kv(kv, key, vt, v)

    g("notensors.gguf", ts=[])
    g("no_tokembd.gguf", ts=[t for t in ts if t[0] != "token_embd.weight"])
    g("no_output_norm.gguf", ts=[t for t in ts if t[0] != "output_norm.weight"])
    g("align0.gguf", kv=k("general.alignment", VT.UINT32, 0))
    g("align3.gguf", kv=k("general.alignment", VT.UINT32, 3))
    g("align_str.gguf", kv=k("general.alignment", VT.STRING, "32"))
    g("align_huge.gguf", kv=k("general.alignment", VT.UINT64, 1 << 40))
    g("embd_str.gguf", kv=k(f"{arch}.embedding_length", VT.STRING, "64"))
    g("blocks_str.gguf", kv=k(f"{arch}.block_count", VT.STRING, "2"))
    g("blocks_float.gguf", kv=k(f"{arch}.block_count", VT.FLOAT32, 2.0))
    g("blocks_more.gguf", kv=k(f"{arch}.block_count", VT.UINT32, 4))
    g("blocks_fewer.gguf", kv=k(f"{arch}.block_count", VT.UINT32, 1))
    g("blocks_zero.gguf", kv=k(f"{arch}.block_count", VT.UINT32, 0))
    g("blocks_huge.gguf", kv=k(f"{arch}.block_count", VT.UINT32, 100000))
    g("kv0.gguf", kv=k(f"{arch}.attention.head_count_kv", VT.UINT32, 0))
    g("kv3.gguf", kv=k(f"{arch}.attention.head_count_kv", VT.UINT32, 3))
    g("heads_huge.gguf", kv=k(f"{arch}.attention.head_count", VT.UINT32, 1_000_000))
    g("heads_array.gguf", kv=k(f"{arch}.attention.head_count", VT.ARRAY, (VT.UINT32, [2, 2])))
    g("embd_huge.gguf", kv=k(f"{arch}.embedding_length", VT.UINT32, 2**32 - 1))
    g("embd_lie.gguf", kv=k(f"{arch}.embedding_length", VT.UINT32, 128))
    g("headdim_huge.gguf", kv=k(f"{arch}.attention.key_length", VT.UINT32, 100000))
    g("bos_str.gguf", kv=k("tokenizer.ggml.bos_token_id", VT.STRING, "1"))
    g("ctx_huge.gguf", kv=k(f"{arch}.context_length", VT.UINT64, 1 << 60))
    g("dup_tensor.gguf", ts=ts + [ts[1]])
    g("dup_key.gguf", kv=kv + [kv[2]])
    g("arch_int.gguf", kv=k("general.architecture", VT.UINT32, 7))
    g("arch_gpt2.gguf", kv=[(key.replace("llama.", "gpt2."), vt, ("gpt2" if key == "general.architecture" else v))
                            for key, vt, v in kv])
    g("no_arch.gguf", kv=k("general.architecture", None, None))
    g("type99.gguf", ts=[[n, ne, 99 if n == "token_embd.weight" else tt] for n, ne, tt in ts])
    g("dims5.gguf", ts=[[n, (ne + (1, 1, 1, 1)) if n == "output_norm.weight" else ne, tt] for n, ne, tt in ts])
    g("misaligned.gguf", offsets=[3] * len(ts))
    g("rows_q8.gguf", ts=ts + [["extra.weight", (33, 2), Q.Q8_0]])
    g("elements.gguf", ts=ts + [["extra.weight", (1 << 32, 1 << 32), Q.F32]], data=False)
    g("version9.gguf", version=9)
    g("ntensors_huge.gguf", n_tensors=1 << 40)
    g("nkv_huge.gguf", n_kv=1 << 40)
    g("valtype99.gguf")
    with open(j("valtype99.gguf"), "r+b") as f:     # the last key's type field rewritten to 99
        raw = bytearray(f.read())
        at = raw.index(b"head_count_kv") + len(b"head_count_kv")
        raw[at:at + 4] = (99).to_bytes(4, "little")
        f.seek(0)
        f.write(raw)
    g("nested.gguf", kv=kv + [("x.nested", VT.ARRAY, (VT.ARRAY, []))])
    g("strlen_huge.gguf", kv=kv)
    with open(j("strlen_huge.gguf"), "r+b") as f:   # the first key's length: 2^60
        f.seek(24)
        f.write((1 << 60).to_bytes(8, "little"))
    experts = I.replace_kv(I.replace_kv(kv, f"{arch}.expert_count", VT.UINT32, 4),
                           f"{arch}.expert_used_count", VT.UINT32, 0)
    ets = [t for t in ts if not t[0].split(".")[-2].startswith(("ffn_gate", "ffn_up", "ffn_down"))]
    for i in range(2):
        b = f"blk.{i}."
        ets += [[b + "ffn_gate_inp.weight", (64, 4), Q.F32], [b + "ffn_gate_exps.weight", (64, 128, 4), Q.F16],
                [b + "ffn_up_exps.weight", (64, 128, 4), Q.F16], [b + "ffn_down_exps.weight", (128, 64, 4), Q.F16]]
    g("experts_used0.gguf", kv=experts, ts=ets)
    good = I.gguf_bytes(kv, ts)
    with open(j("trunc_data.gguf"), "wb") as f:
        f.write(good[:len(good) - 4096])
    with open(j("trunc_head.gguf"), "wb") as f:
        f.write(good[:100])
    with open(j("badmagic.gguf"), "wb") as f:
        f.write(b"GGUX" + good[4:])
    open(j("empty.gguf"), "wb").close()
    os.mkdir(j("dir.gguf"))
    os.mkfifo(j("fifo.gguf"))
    os.symlink("/dev/zero", j("zero.gguf"))
    with open(j("model.bin"), "wb") as f:         # a GGUF under another name: replay's magic check
        f.write(good + b"\0" * (8 << 20))

    # traces
    ok = I.ok_rows()
    I.write_trace(j("ok.parquet"), ok)
    I.write_trace(j("huge.parquet"), [(0, 1, 0, -1, 0, 0, 0, 0), (1, 1, 2, 0, 0, 1 << 36, -1, 6),
                                      (2, 1, 5, 0, 0, 1 << 36, 0, 0)])
    I.write_trace(j("hugefile.parquet"), ok, meta={"files": [{"id": 0, "path": "/f", "pages": 1 << 40}]})
    I.write_trace(j("centuries.parquet"), [(0, 1, 0, -1, 0, 0, 0, 0), (1, 1, 2, 0, 0, 8, -1, 6),
                                           (1 << 62, 1, 5, 0, 0, 8, 0, 0)])   # a timeline row per 10 ms
    I.write_trace(j("meta_notjson.parquet"), ok, raw_meta=b"{not json")
    I.write_trace(j("meta_list.parquet"), ok, raw_meta=b"[1, 2]")
    I.write_trace(j("meta_fileid.parquet"), ok, meta={"files": [{"id": "x", "path": "/f", "pages": 1}]})
    I.write_trace(j("meta_negpages.parquet"), ok, meta={"files": [{"id": 0, "path": "/f", "pages": -1}]})
    I.write_trace(j("meta_dupfile.parquet"), ok, meta={"files": [{"id": 0, "path": "/f", "pages": 1},
                                                                 {"id": 0, "path": "/g", "pages": 1}]})
    I.write_trace(j("meta_phases.parquet"), ok, meta={"phases": [1, 2]})
    I.write_trace(j("meta_files_dict.parquet"), ok, meta={"files": {"0": 1}})
    I.write_trace(j("schema2.parquet"), ok, meta={"schema_version": 2})
    I.write_trace(j("nometa.parquet"), ok, raw_meta=False)
    I.write_trace(j("floatcol.parquet"), ok, cols={"t": I.np.array([0.0, 1.0, 2.5])})
    I.write_trace(j("strcol.parquet"), ok, cols={"op": I.np.array(["a", "b", "c"])})
    I.write_trace(j("pidbig.parquet"), ok, cols={"pid": I.np.array([1, 1 << 40, 1], I.np.int64)})
    I.write_trace(j("backwards.parquet"), [(5, 1, 0, -1, 0, 0, 0, 0), (1, 1, 2, 0, 0, 8, -1, 6)])
    I.write_trace(j("negtime.parquet"), [(-5, 1, 0, -1, 0, 0, 0, 0)], cols={"t": I.np.array([-5], I.np.int64)})
    I.write_trace(j("op99.parquet"), ok + [(3, 1, 99, -1, 0, 0, 0, 0)])
    I.write_trace(j("nomap.parquet"), ok + [(3, 1, 4, 7, 0, 1, 0, 0)])
    I.write_trace(j("pastmap.parquet"), ok + [(3, 1, 4, 0, 60, 10, 0, 0)])
    I.write_trace(j("adj.parquet"), [(0, 1, 0, -1, 0, 0, 5000, 0)])
    I.write_trace(j("phase.parquet"), ok + [(3, 1, 10, -1, 0, 0, 3, 0)])
    I.write_trace(j("mmap0.parquet"), [(0, 1, 2, 0, 0, 0, -1, 6)])
    I.write_trace(j("filepast.parquet"), [(0, 1, 2, 0, 0, 10, 0, 2)],
                  meta={"files": [{"id": 0, "path": "/f", "pages": 4}]})
    I.write_trace(j("pagebig.parquet"), ok + [(3, 1, 4, 0, 1 << 50, 1, 0, 0)])
    I.write_trace(j("nullcol.parquet"), ok, cols={"npages": I.pa.array([0, None, 64], I.pa.int64())})
    I.write_trace(j("badname.parquet"), ok, cols={"zzzzzz": I.np.zeros(3, I.np.int64)})
    with open(j("badname.parquet"), "r+b") as f:      # a column name that is not UTF-8 (atheris found it)
        raw = f.read().replace(b"zzzzzz", b"\xed\xa0zzzz")
        f.seek(0)
        f.write(raw)
    I.write_trace(j("class.parquet"), [(0, 1, 2, 0, 0, 8, -1, 6 | 200 << 8)])
    with open(j("garbage.parquet"), "wb") as f:
        f.write(os.urandom(4096))
    open(j("empty.parquet"), "wb").close()
    os.mkfifo(j("fifo.parquet"))
    os.symlink("/dev/zero", j("zero.parquet"))
    os.mkdir(j("dir.parquet"))
    with open(j("short.bin"), "wb") as f:
        f.write(b"\1" * 25)
    with open(j("bad.csv"), "w") as f:
        f.write("1\n2\nthree\n")
    with open(j("big.csv"), "w") as f:
        f.write("1\n99999999999999999999\n")
    with open(j("twonums.csv"), "w") as f:
        f.write("1\n2 3\n")
    open(j("empty.csv"), "w").close()
    with open(j("t.csv.zst"), "wb") as f:
        f.write(b"\x28\xb5\x2f\xfd")
    os.mkfifo(j("fifo.csv"))

    # scenarios
    def sc(name, text, mode="w"):
        with open(j(name), mode) as f:
            f.write(text)

    sc("ok.toml", I.scenario())
    sc("dur_huge.toml", I.scenario(duration="1e15"))
    sc("dur_zero.toml", I.scenario(duration="0"))
    sc("dur_nan.toml", I.scenario(duration="nan"))
    sc("dur_neg.toml", I.scenario(duration="-1"))
    sc("dwell0.toml", I.scenario(switch='pattern = "random"\ndwell = 0\ngap = 0'))
    sc("dwell_tiny.toml", I.scenario(duration="2000000", switch='pattern = "random"\ndwell = [0, 1e-6]\ngap = 0'))
    sc("dwell_inf.toml", I.scenario(switch='dwell = [1, inf]'))
    sc("dwell_neg.toml", I.scenario(switch='dwell = -5'))
    sc("poisson_tiny.toml", I.scenario(llm=I.llm(requests='arrival = "poisson"\nmean_interval = 1e-9')))
    sc("poisson_zero.toml", I.scenario(llm=I.llm(requests='arrival = "poisson"\nmean_interval = 0')))
    sc("layers_huge.toml", I.scenario(llm=I.llm(model='{ preset = "Qwen3-0.6B", type = "q4_0", layers = 100000 }')))
    sc("layers_many.toml", I.scenario(duration="86400", llm=I.llm(
        model='{ preset = "Qwen3-0.6B", type = "q4_0", layers = 1000 }',
        requests='arrival = "poisson"\nmean_interval = 10.0')))
    sc("matrix_nan.toml", I.scenario(switch='pattern = "markov"\nmatrix = [[nan, 1.0], [1.0, 1.0]]'))
    sc("matrix_inf.toml", I.scenario(switch='pattern = "markov"\nmatrix = [[inf, 1.0], [1.0, 1.0]]'))
    sc("matrix_shape.toml", I.scenario(switch='pattern = "markov"\nmatrix = [[1.0]]'))
    sc("sigma0.toml", I.scenario(switch='pattern = "gaussian"\nsigma = 0'))
    sc("req_sigma0.toml", I.scenario(llm=I.llm(requests='arrival = "poisson"\npattern = "gaussian"\nsigma = 0.0')))
    sc("latin1.toml", I.scenario(top='description = "caf\u00e9"').encode("latin-1"), "wb")
    sc("badtoml.toml", "name = \n[[[")
    sc("unknown_key.toml", I.scenario(top="colour = 3"))
    sc("tick_tiny.toml", I.scenario(app="tick = 0.001").replace("tick = 1.0\n", "", 1))
    sc("mb_huge.toml", I.scenario().replace("mb = 8", "mb = 1e30"))
    sc("mb_zero.toml", I.scenario().replace("mb = 8", "mb = 0"))
    sc("scale_inf.toml", I.scenario(app="scale = inf"))
    sc("times_nan.toml", I.scenario(llm=I.llm(requests='arrival = "times"\ntimes = [1.0, nan]')))
    sc("times_empty.toml", I.scenario(llm=I.llm(requests='arrival = "times"\ntimes = []')))
    sc("calls_inf.toml", I.scenario(llm=I.llm(requests='arrival = "calls"\ncalls = [[inf, "s0"]]')))
    sc("calls_unknown.toml", I.scenario(llm=I.llm(requests='arrival = "calls"\ncalls = [[1.0, "nobody"]]')))
    sc("event_far.toml", I.scenario(tail='[[event]]\nt = 1e300\naction = "kill"\napp = "chat"'))
    sc("event_app.toml", I.scenario(tail='[[event]]\nt = 5\naction = "kill"\napp = "nobody"'))
    sc("adj_huge.toml", I.scenario(tail="[oom_score_adj]\nmine = 5000"))
    sc("ctx_huge.toml", I.scenario(llm=I.llm(keys="").replace("ctx = 1024", "ctx = 1099511627776")))
    sc("ctx_small.toml", I.scenario(llm=I.llm().replace("ctx = 1024", "ctx = 8")))
    sc("paths_many.toml", I.scenario(llm=I.llm(keys="paths = 100")))
    sc("count_neg.toml", I.scenario(llm=I.llm(requests='arrival = "poisson"\ncount = -1')))
    sc("model_missing.toml", I.scenario(llm=I.llm(model='{ path = "nowhere.gguf" }')))
    sc("model_bad.toml", I.scenario(llm=I.llm(model='{ path = "align0.gguf" }')))
    sc("model_dimstr.toml", I.scenario(llm=I.llm(model='{ preset = "Qwen3-0.6B", n_embd = "abc" }')))
    sc("model_preset.toml", I.scenario(llm=I.llm(model='{ preset = "GPT-9" }')))
    sc("pattern.toml", I.scenario(switch='pattern = "zigzag"'))
    sc("round_noorders.toml", I.scenario(switch='pattern = "round"'))
    sc("round_zero.toml", I.scenario(duration="2000000", switch='pattern = "round"\norders = [["chat", "maps"]]\n'
                                     'rounds = 1000000000000\nperiod = 0\ngap = 0\ndwell = 0'))
    sc("seed_neg.toml", I.scenario().replace("seed = 1", "seed = -1"))
    sc("seed_str.toml", I.scenario().replace("seed = 1", 'seed = "one"'))
    sc("no_apps.toml", 'name = "x"\nseed = 1\nduration = 10.0\n')
    sc("app_from.toml", I.scenario(app='from = "nowhere"'))
    sc("budget_str.toml", I.scenario(llm=I.llm(keys='engine = "llms"\nbudget = "lots"')))
    os.mkfifo(j("fifo.toml"))
    os.symlink("/dev/zero", j("zero.toml"))
    # /dev/null as an output, through a link: were the check to fail, the atomic rename would replace
    # the link, never the device itself (as root, `-o /dev/null` would replace /dev/null)
    os.symlink("/dev/null", j("null.parquet"))
    os.symlink("/dev/null", j("null.toml"))
    os.mkdir(j("dir.toml"))
    os.makedirs(j("full"))
    with open(j("full", "x"), "w") as f:
        f.write("x")
    with open(j("device.toml"), "w") as f:
        f.write("not = [valid")
    os.mkfifo(j("fifo_device.toml"))


# ------------------------------------------------------------------------------------------------
# cases

def cases() -> list[Case]:
    C = []

    def add(id, args, expect, proc=False, env=None, fsize=None):
        C.append(Case(id, args.split() if isinstance(args, str) else args, expect, proc or fsize is not None,
                      env or {}, fsize))

    # --- GGUF metadata the loader trusts: `workload llama` over each malformed header ------------
    wl = "workload llama {d}/%s --prompt 4 --decode 1 --ctx 64 -o {out}/t.parquet"
    for name, expect, proc in [
            ("notensors.gguf", "GGUF with no tensors", False),
            ("no_tokembd.gguf", "'token_embd.weight' is missing", False),
            ("no_output_norm.gguf", "'output_norm.weight' is missing", False),
            ("align0.gguf", "general.alignment 0: expected a power of two", False),
            ("align3.gguf", "general.alignment 3: expected a power of two", False),
            ("align_str.gguf", "general.alignment has type string", False),
            ("align_huge.gguf", "general.alignment 1099511627776", False),
            ("embd_str.gguf", "llama.embedding_length has type string", False),
            ("blocks_str.gguf", "llama.block_count has type string", False),
            ("blocks_float.gguf", "llama.block_count has type float32", False),
            ("blocks_more.gguf", "'blk.2.attn_norm.weight' is missing", False),
            ("blocks_fewer.gguf", "beyond block_count 1", False),
            ("blocks_zero.gguf", "lacks llama.block_count", False),
            ("blocks_huge.gguf", "llama.block_count = 100,000 is outside", True),
            ("kv0.gguf", "head_count_kv = 0 is outside", False),
            ("kv3.gguf", "head_count_kv 3 does not divide", False),
            ("heads_huge.gguf", "head_count = 1,000,000 is outside", False),
            ("heads_array.gguf", "head_count has type array", False),
            ("embd_huge.gguf", "embedding_length = 4,294,967,295 is outside", True),
            ("embd_lie.gguf", "the metadata says (128, 300)", False),
            ("headdim_huge.gguf", "key_length = 100,000 is outside", False),
            ("bos_str.gguf", "bos_token_id has type string", False),
            ("ctx_huge.gguf", "context_length", False),
            ("dup_tensor.gguf", "appears twice (gguf.cpp refuses duplicate names)", False),
            ("dup_key.gguf", "appears twice (gguf.cpp refuses duplicate keys)", False),
            ("arch_int.gguf", "general.architecture is not a string", False),
            ("arch_gpt2.gguf", "architecture 'gpt2' is not supported", False),
            ("no_arch.gguf", "without general.architecture", False),
            ("type99.gguf", "unknown ggml type 99", False),
            ("dims5.gguf", "has 5 dimensions", False),
            ("misaligned.gguf", "not a multiple of the alignment", False),
            ("rows_q8.gguf", "not whole Q8_0 blocks", False),
            ("elements.gguf", "elements (more than int64 holds)", True),
            ("version9.gguf", "GGUF version 9", False),
            ("ntensors_huge.gguf", "declares 1,099,511,627,776 tensors", True),
            ("nkv_huge.gguf", "declares 1,099,511,627,776 metadata keys", True),
            ("valtype99.gguf", "unknown value type 99", False),
            ("nested.gguf", "unsupported array element type 9", False),
            ("strlen_huge.gguf", "truncated GGUF", True),
            ("experts_used0.gguf", "expert_used_count 0 is outside 1..expert_count 4", False),
            ("trunc_data.gguf", "truncated GGUF: tensor data runs to byte", False),
            ("trunc_head.gguf", "declares 8 metadata keys, more than its 100 bytes can hold", False),
            ("badmagic.gguf", "not a GGUF file (magic b'GGUX'", False),
            ("empty.gguf", "not a GGUF file (magic b''", False),
            ("dir.gguf", "is a directory, expected a .gguf model file", False),
            ("fifo.gguf", "is a FIFO, not a regular file", True),
            ("zero.gguf", "is a character device, not a regular file", True),
            ("missing.gguf", "no such file", False)]:
        add("gguf-" + name.split(".")[0], wl % name, expect, proc)
    # the same headers through the other commands that read models
    add("compare-gguf-dup", "compare {d}/dup_tensor.gguf -o {out}/cmp", "appears twice")
    add("compare-gguf-embd", "compare {d}/embd_huge.gguf -o {out}/cmp", "embedding_length = 4,294,967,295", True)
    add("compare-gguf-kv0", "compare {d}/kv0.gguf -o {out}/cmp", "head_count_kv = 0 is outside")
    add("predict-gguf-dup", "predict {d}/dup_tensor.gguf --prompt 4 --decode 1 --ctx 64 --mem-limit 1G",
        "appears twice")
    add("predict-gguf-trunc", "predict {d}/trunc_data.gguf --prompt 4 --decode 1 --ctx 64 --mem-limit 50%",
        "truncated GGUF")
    add("predict-gguf-fifo", "predict {d}/fifo.gguf --prompt 4 --decode 1 --ctx 64 --mem-limit 1G", "is a FIFO",
        True)
    add("synth-scenario-gguf", "workload scenario {d}/model_bad.toml -o {out}/t.parquet",
        "general.alignment 0")
    add("trace-llama-gguf", "trace llama {d}/align0.gguf --prompt 4 --decode 1 --ctx 64 -o {out}/t.parquet",
        "general.alignment 0")

    # --- numbers at the edges: sizes -----------------------------------------------------------
    rp = "replay {d}/ok.parquet "
    for id, opt, expect in [
            ("mem-huge", "--mem 99999999999T", "is more than 64T"),
            ("mem-inf", "--mem inf", "cannot read 'inf' as a size"),
            ("mem-nan", "--mem nan", "cannot read 'nan' as a size"),
            ("mem-exp", "--mem 1e400", "cannot read '1e400' as a size"),
            ("mem-neg", "--mem -1G", "is negative"),
            ("mem-zero", "--mem 0", "is zero"),
            ("mem-sub-page", "--mem 100", "less than one 4 KiB page"),
            ("mem-frac", "--mem 1.5", "not a whole number of bytes"),
            ("mem-unit", "--mem 12X", "cannot read '12X' as a size"),
            ("mem-long", "--mem " + "9" * 5000, "cannot read '9999"),
            ("memcg-huge", "--memcg-limit 99999999999T", "--memcg-limit: '99999999999T' is more than 64T"),
            ("zram-2e64", "--mem 1T --zram zstd:18446744073709551616", "is more than 64T"),
            ("zram-huge", "--mem 1T --zram zstd:16T", "more than 4.0 TiB"),
            ("zram-zero", "--mem 1G --zram lz4:0", "is zero"),
            ("zram-inf", "--mem 1G --zram lz4:inf", "cannot read 'inf'"),
            ("zram-algo", "--mem 1G --zram foo:1G", "unknown compressor 'foo'; known: lzo-rle, lzo, lz4, zstd"),
            ("zram-form", "--mem 1G --zram lz4", "expected ALGO:SIZE"),
            ("zram-noalgo", "--mem 1G --zram :1G", "expected ALGO:SIZE"),
            ("swappiness-high", "--mem 1G --swappiness 201", "--swappiness"),
            ("swappiness-nan", "--mem 1G --swappiness nan", "'nan' is not a valid integer"),
            ("policy", "--mem 1G --policy nope", "'--policy': 'nope' is not one of 'stock'"),
            ("no-mem", "", "give the memory to emulate")]:
        add("replay-" + id, (rp + opt).split(), expect, proc=id in ("zram-2e64", "mem-huge", "zram-huge"))

    # --- numbers at the edges: counts and tokens -----------------------------------------------
    wlo = "workload llama {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o {out}/t.parquet "
    for id, opt, expect, proc in [
            ("prompt-float", "--prompt 1e12", "'1e12' is not a valid integer", False),
            ("prompt-huge", "--prompt 1000000000000", "--prompt 1000000000000: must be at most 16,777,216", True),
            ("prompt-zero", "--prompt 0", "--prompt 0: must be at least 1", False),
            ("decode-neg", "--decode -1", "--decode -1: must be at least 0", False),
            ("decode-huge", "--decode 16000000 --ctx 16777216", "event budget", True),
            ("ctx-zero", "--ctx 0", "--ctx 0: must be at least 1", False),
            ("ctx-huge", "--ctx 1099511627776", "--ctx 1099511627776: must be at most", True),
            ("batch-zero", "--batch 0", "--batch 0: must be at least 1", False),
            ("ubatch-neg", "--ubatch -1", "--ubatch -1: must be at least 1", False),
            ("requests-zero", "--requests 0", "--requests 0: must be at least 1", False),
            ("requests-neg", "--requests -3", "--requests -3: must be at least 1", False),
            ("requests-many", "--requests 60000 --decode 200 --ctx 512", "event budget", True),
            ("seqs-zero", "--seqs 0", "--seqs 0: must be at least 1", False),
            ("seqs-many", "--seqs 1000", "--seqs 1000: must be at most 256", False),
            ("pid-neg", "--pid -1", "--pid -1: must be at least 0", False),
            ("pid-huge", "--pid 1099511627776", "--pid 1099511627776: must be at most 4,194,304", False),
            ("seed-neg", "--seed -1", "--seed -1: must be at least 0", False),
            ("routing-junk", "--moe-routing zipf:abc", "--moe-routing 'zipf:abc'", False),
            ("routing-nan", "--moe-routing zipf:nan", "--moe-routing 'zipf:nan'", False),
            ("routing-name", "--moe-routing hot", "--moe-routing 'hot'", False),
            ("kv-manager", "--kv-manager nope", "'--kv-manager': 'nope' is not", False),
            ("kv-q8-nofa", "--kv-type q8_0 --no-flash-attn", "needs flash attention", False),
            ("prompt-over-ctx", "--prompt 100", "longer than the context", False),
            ("device-name", "--device nope", "unknown device 'nope'", False),
            ("device-fifo", "--device {d}/fifo_device.toml", "--device {d}/fifo_device.toml: is a FIFO", True),
            ("device-toml", "--device {d}/device.toml", "not valid TOML", False)]:
        add("llama-" + id, (wlo + opt).split(), expect, proc)
    lay = "workload llama --prompt 4 --decode 1 --ctx 64 -o {out}/t.parquet --layout-only "
    add("layout-preset", lay + "GPT-9", "'--layout-only': 'GPT-9' is not one of 'Qwen3-0.6B'")
    add("layout-layers0", lay + "Qwen3-0.6B --layers 0", "--layers 0: must be a positive whole number")
    add("layout-layers-huge", lay + "Qwen3-0.6B --layers 100000", "n_layer (--layers) 100,000 is outside 0..1,024")
    add("layout-nothing", "workload llama --prompt 4 --decode 1 --ctx 64 -o {out}/t.parquet",
        "give MODEL.gguf or --preset NAME")
    # MoE expert paging (issue 42): a dense model given an MoE mode, slots above the expert count,
    # a skew or locality outside its range
    add("moe-dense", lay + "Qwen3-0.6B --layers 1 --load-mode willneed", "the model has no experts")
    add("moe-slots", lay + "Qwen3-30B-A3B --layers 1 --load-mode direct:129", "direct:SLOTS 129: must be at most 128")
    add("moe-slots-few", lay + "Qwen3-30B-A3B --layers 1 --load-mode direct:2", "must be at least 8")
    add("moe-pin", lay + "Qwen3-30B-A3B --layers 1 --load-mode pin-hot:0", "pin-hot:N 0: must be at least 1")
    add("moe-cold", lay + "Qwen3-30B-A3B --layers 1 --load-mode cold:x", "cold:x: T must be an integer")
    add("moe-mode", lay + "Qwen3-30B-A3B --layers 1 --load-mode lazy", "--load-mode 'lazy'")
    add("moe-skew", lay + "Qwen3-30B-A3B --layers 1 --moe-routing zipf:11", "0 < S <= 10")
    add("moe-stick", lay + "Qwen3-30B-A3B --layers 1 --moe-routing uniform,stick=1.5", "stick=P or corr=C")
    add("moe-recorded", lay + "Qwen3-30B-A3B --layers 1 --moe-routing recorded:{d}/ok.gguf", "not a routing recording")
    add("moe-exp-skew", "experiment moe-paging -o {out}/e --quick --set skews=11", "skews: 11 is outside 0..10")
    add("moe-exp-strategy", "experiment moe-paging -o {out}/e --quick --set strategies=mlock-all",
        "unknown mlock-all")

    # --- model synth --------------------------------------------------------------------------
    sy = "model synth {out}/m.gguf "
    for id, opt, expect, proc in [
            ("layers0", "--layers 0 --dim 64 --ffn 128 --heads 2 --vocab 300", "--layers 0: must be a positive whole", False),
            ("no-shape", "--dim 64", "give --preset NAME or a full shape", False),
            ("dim-neg", "--layers 1 --dim -64 --ffn 128 --heads 2 --vocab 300", "n_embd (--dim) -64 is outside", False),
            ("dim-odd", "--layers 1 --dim 100 --ffn 128 --heads 2 --vocab 300", "multiple of 32", False),
            ("dim-huge", "--layers 1 --dim 4294967296 --ffn 128 --heads 2 --vocab 300", "n_embd (--dim) 4,294,967,296", True),
            ("heads", "--layers 1 --dim 64 --ffn 128 --heads 3 --vocab 300", "not a multiple of --heads 3", False),
            ("kv-heads", "--layers 1 --dim 64 --ffn 128 --heads 2 --kv-heads 3 --vocab 300", "not a multiple of --kv-heads 3", False),
            ("vocab-small", "--layers 1 --dim 64 --ffn 128 --heads 2 --vocab 10", "--vocab must be at least", False),
            ("vocab-huge", "--layers 1 --dim 64 --ffn 128 --heads 2 --vocab 100000000", "n_vocab (--vocab) 100,000,000", False),
            ("layers-huge", "--preset Qwen3-0.6B --layers 100000", "n_layer (--layers) 100,000 is outside", False),
            ("preset", "--preset GPT-9", "'--preset': 'GPT-9' is not one of 'Qwen3-0.6B'", False),
            ("experts", "--preset Mixtral-8x7B --layers 1 --experts 2 --experts-used 5", "--experts-used must be in 1..2", False),
            ("seed", "--preset Qwen3-0.6B --layers 1 --seed -1", "--seed -1: must be at least 0", False),
            ("disk", "--preset Mixtral-8x7B --type f16 --layers 1024", "TiB, more than the", True)]:
        add("synth-" + id, (sy + opt).split(), expect, proc)

    # --- a trace that asks too much, and traces that lie ---------------------------------------
    for id, f, expect, proc in [
            ("huge", "huge.parquet", "needs 1.1 TiB of memory to emulate, more than this machine can give", True),
            ("hugefile", "hugefile.parquet", "of memory to emulate, more than this machine can give", True),
            ("centuries", "centuries.parquet", "of memory to emulate, more than this machine can give", True),
            ("meta-notjson", "meta_notjson.parquet", "metadata is not JSON", False),
            ("meta-list", "meta_list.parquet", "metadata is a list, expected an object", False),
            ("meta-fileid", "meta_fileid.parquet", "files[0]: id = 'x'", False),
            ("meta-negpages", "meta_negpages.parquet", "files[0]: pages = -1", False),
            ("meta-dupfile", "meta_dupfile.parquet", "file id 0 appears twice", False),
            ("meta-phases", "meta_phases.parquet", "'phases' is not a list of names", False),
            ("meta-files-dict", "meta_files_dict.parquet", "'files' is not a list of objects", False),
            ("schema2", "schema2.parquet", "trace schema version 2", False),
            ("nometa", "nometa.parquet", "without kmemsim trace metadata", False),
            ("floatcol", "floatcol.parquet", "column 't' is float64, expected integers", False),
            ("strcol", "strcol.parquet", "column 'op' is object, expected integers", False),
            ("pidbig", "pidbig.parquet", "pid = 1099511627776 does not fit its column", False),
            ("backwards", "backwards.parquet", "time goes backwards", False),
            ("negtime", "negtime.parquet", "negative time", False),
            ("op99", "op99.parquet", "unknown op", False),
            ("nomap", "nomap.parquet", "mapping used but never created", False),
            ("pastmap", "pastmap.parquet", "range runs past the end of its mapping", False),
            ("adj", "adj.parquet", "oom_score_adj outside -1000..1000", False),
            ("phase", "phase.parquet", "PHASE names a phase not in the trace metadata", False),
            ("mmap0", "mmap0.parquet", "MMAP of zero pages", False),
            ("filepast", "filepast.parquet", "file mapping runs past the end of the file", False),
            ("pagebig", "pagebig.parquet", "page number out of range", False),
            ("nullcol", "nullcol.parquet", "column 'npages' is float64, expected integers", False),
            ("badname", "badname.parquet", "not a readable Parquet trace ('utf-8' codec", False),
            ("class", "class.parquet", "MMAP of an unknown page class", False),
            ("garbage", "garbage.parquet", "not a readable Parquet trace", False),
            ("empty", "empty.parquet", "not a readable Parquet trace", False),
            ("fifo", "fifo.parquet", "is a FIFO, not a regular file", True),
            ("zero", "zero.parquet", "is a character device, not a regular file", True),
            ("dir", "dir.parquet", "is a directory", False),
            ("missing", "missing.parquet", "no such file", False),
            ("gguf", "ok.gguf", "a GGUF model, not a trace", False),
            ("gguf-bin", "model.bin", "a GGUF model, not a trace", True),
            ("short-bin", "short.bin", "truncated oracleGeneral trace", False),
            ("csv-bad", "bad.csv", "bad.csv:3: object id 'three' is not a non-negative integer", False),
            ("csv-big", "big.csv", "does not fit in 64 bits", False),
            ("csv-two", "twonums.csv", "twonums.csv:2: object id '2 3'", False),
            ("csv-empty", "empty.csv", "empty trace: the csv file has no lines", False),
            ("zst", "t.csv.zst", "zstd-compressed trace", False),
            ("csv-fifo", "fifo.csv", "is a FIFO", True)]:
        add("trace-" + id, ["replay", "{d}/" + f, "--mem", "1T"], expect, proc)
    for id, f, expect in [("meta-notjson", "meta_notjson.parquet", "metadata is not JSON"),
                          ("floatcol", "floatcol.parquet", "expected integers"),
                          ("fifo", "fifo.parquet", "is a FIFO"),
                          ("dir", "dir.parquet", "is a directory"),
                          ("gguf", "ok.gguf", "not a readable Parquet trace"),
                          ("class", "class.parquet", "MMAP of an unknown page class"),
                          ("badname", "badname.parquet", "not a readable Parquet trace"),
                          ("backwards", "backwards.parquet", "time goes backwards")]:
        add("info-" + id, ["trace", "info", "{d}/" + f], expect, proc=id == "fifo")

    # --- scenarios that never end, and scenario values --------------------------------------------
    ws = "workload scenario {d}/%s -o {out}/t.parquet"
    for id, f, expect, proc in [
            ("dur-huge", "dur_huge.toml", "duration: must be <= 2592000", True),
            ("dur-zero", "dur_zero.toml", "duration: must be > 0 seconds", False),
            ("dur-nan", "dur_nan.toml", "duration: expected a number, got number nan", False),
            ("dur-neg", "dur_neg.toml", "duration: must be >= 0", False),
            ("dwell0", "dwell0.toml", "switch.dwell and switch.gap are both 0 s", True),
            ("dwell-tiny", "dwell_tiny.toml", "event budget", True),
            ("dwell-inf", "dwell_inf.toml", "switch.dwell: expected a number or a [low, high] pair", False),
            ("dwell-neg", "dwell_neg.toml", "switch.dwell: must be >= 0", False),
            ("poisson-tiny", "poisson_tiny.toml", "event budget", True),
            ("poisson-zero", "poisson_zero.toml", "mean_interval: must be > 0 seconds", False),
            ("layers-huge", "layers_huge.toml", "llm.model.layers: must be <= 1024", True),
            ("layers-many", "layers_many.toml", "event budget", True),
            ("matrix-nan", "matrix_nan.toml", "switch.matrix: entries must be finite", False),
            ("matrix-inf", "matrix_inf.toml", "switch.matrix: entries must be finite", False),
            ("matrix-shape", "matrix_shape.toml", "expected a 2x2 matrix", False),
            ("sigma0", "sigma0.toml", "switch.sigma: must be > 0", False),
            ("req-sigma0", "req_sigma0.toml", "llm.requests.sigma: must be > 0", False),
            ("latin1", "latin1.toml", "not UTF-8 text", False),
            ("badtoml", "badtoml.toml", "not valid TOML", False),
            ("unknown-key", "unknown_key.toml", "unknown key 'colour'", False),
            ("tick-tiny", "tick_tiny.toml", "apps.chat.tick: must be >= 0.01", False),
            ("mb-huge", "mb_huge.toml", "mb: must be <= 67108864", False),
            ("mb-zero", "mb_zero.toml", "mb: must be > 0", False),
            ("scale-inf", "scale_inf.toml", "apps.chat.scale: expected a number > 0", False),
            ("times-nan", "times_nan.toml", "llm.requests.times: expected seconds in", False),
            ("times-empty", "times_empty.toml", "needs a non-empty list of seconds", False),
            ("calls-inf", "calls_inf.toml", "llm.requests.calls: call 0", False),
            ("calls-unknown", "calls_unknown.toml", "unknown session 'nobody'", False),
            ("event-far", "event_far.toml", "event[0].t: must be <= 2592000", False),
            ("event-app", "event_app.toml", "unknown app 'nobody'", False),
            ("adj-huge", "adj_huge.toml", "oom_score_adj.mine: must be <= 1000", False),
            ("ctx-huge", "ctx_huge.toml", "llm.ctx: must be <= 16777216", False),
            ("ctx-small", "ctx_small.toml", "cannot hold even the smallest request", False),
            ("paths-many", "paths_many.toml", "llm.paths: must be <= 64", False),
            ("count-neg", "count_neg.toml", "llm.requests.count: must be >= 0", False),
            ("model-missing", "model_missing.toml", "no such model file", False),
            ("model-dimstr", "model_dimstr.toml", "llm.model: model shape: n_embd (--dim) 'abc'", False),
            ("model-preset", "model_preset.toml", "unknown preset 'GPT-9'", False),
            ("pattern", "pattern.toml", "switch.pattern: unknown value 'zigzag'", False),
            ("round-noorders", "round_noorders.toml", "needs switch.orders", False),
            ("round-zero", "round_zero.toml", "event budget", True),
            ("seed-neg", "seed_neg.toml", "seed: must be >= 0", False),
            ("seed-str", "seed_str.toml", "seed: expected an integer", False),
            ("no-apps", "no_apps.toml", "needs [apps] or [llm]", False),
            ("app-from", "app_from.toml", "no app definition", False),
            ("budget-str", "budget_str.toml", "llm.budget: cannot read 'lots' as a size", False),
            ("fifo", "fifo.toml", "is a FIFO, not a regular file", True),
            ("zero", "zero.toml", "is a character device", True),
            ("dir", "dir.toml", "is a directory", False),
            ("missing", "missing.toml", "no such file", False)]:
        add("scenario-" + id, ws % f, expect, proc)
    add("scenario-plan-never", "workload scenario {d}/dwell0.toml --plan", "never moves", True)
    add("scenario-plan-budget", "workload scenario {d}/poisson_tiny.toml --plan", "event budget", True)
    add("scenario-set-form", "workload scenario {d}/ok.toml --set nope -o {out}/t.parquet", "expected KEY=VALUE")
    add("scenario-set-neg", "workload scenario {d}/ok.toml --set seed=-1 -o {out}/t.parquet", "seed: must be >= 0")
    add("scenario-set-inf", "workload scenario {d}/ok.toml --set duration=inf -o {out}/t.parquet",
        "duration: expected a number, got number inf")
    add("scenario-set-table", "workload scenario {d}/ok.toml --set switch.pattern.x=1 -o {out}/t.parquet",
        "'pattern' is not a table")
    add("scenario-budget-env", "workload scenario {d}/ok.toml -o {out}/t.parquet", "event budget of 10",
        env={"KMEMSIM_MAX_EVENTS": "10"})
    add("scenario-budget-junk", "workload scenario {d}/ok.toml -o {out}/t.parquet",
        "KMEMSIM_MAX_EVENTS='lots': expected a whole number", env={"KMEMSIM_MAX_EVENTS": "lots"})
    add("scenario-device", "workload scenario {d}/ok.toml --device {d}/fifo_device.toml -o {out}/t.parquet",
        "is a FIFO", True)

    # --- outputs that cannot be written -------------------------------------------------------------
    long = "x" * 300
    for id, args, expect in [
            ("llama-proc", "workload llama {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o /proc/kmemsim.parquet",
             "cannot write in /proc"),
            ("llama-sys", "workload llama {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o /sys/kmemsim.parquet",
             "cannot write in /sys"),
            ("llama-missing-dir", "workload llama {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o {out}/no/t.parquet",
             "directory {out}/no does not exist"),
            ("llama-dir", "workload llama {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o {d}",
             "is a directory"),
            ("llama-devnull", "workload llama {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o {d}/null.parquet",
             "null.parquet: is a character device; give a file name to write"),
            ("llama-fifo", "workload llama {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o {d}/fifo.parquet",
             "is a FIFO; give a file name to write"),
            ("llama-long", f"workload llama {{d}}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o {{out}}/{long}.parquet",
             "a name of 308 characters, longer than the file system takes"),
            ("llama-notdir", "workload llama {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o {d}/ok.gguf/t.parquet",
             "is not a directory"),
            ("scenario-proc", "workload scenario {d}/ok.toml -o /proc/t.parquet", "cannot write in /proc"),
            ("scenario-devnull", "workload scenario {d}/ok.toml -o {d}/null.parquet", "is a character device"),
            ("synth-proc", "model synth /proc/m.gguf --preset Qwen3-0.6B --layers 1", "cannot write in /proc"),
            ("synth-dir", "model synth {d} --preset Qwen3-0.6B --layers 1", "is a directory"),
            ("compare-file", "compare {d}/ok.toml -o {d}/ok.gguf", "Directory '{d}/ok.gguf' is a file"),
            ("compare-proc", "compare {d}/ok.toml -o /proc/kmemsim-out", "cannot write in /proc"),
            ("compare-long", f"compare {{d}}/ok.toml -o {{out}}/{long}", "longer than the file system takes"),
            ("experiment-proc", "experiment mzcache-ttft --quick -o /proc/kmemsim-out", "cannot write in /proc"),
            ("demo-proc", "demo -o /proc/kmemsim-out", "cannot write in /proc")]:
        add("out-" + id, args, expect)
    # a disk that fills up mid-write (RLIMIT_FSIZE: the write fails with EFBIG as ENOSPC would)
    add("out-full-llama", "workload llama {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 -o {out}/t.parquet",
        "File too large", fsize=4096)
    add("out-full-scenario", "workload scenario {d}/ok.toml -o {out}/t.parquet", "File too large", fsize=4096)
    add("out-full-synth", "model synth {out}/m.gguf --preset Qwen3-0.6B --layers 1", "File too large",
        fsize=1 << 20)
    add("out-llama-empty", ["workload", "llama", "{d}/ok.gguf", "--prompt", "4", "--decode", "1", "--ctx", "64",
                            "-o", ""], "-o: empty path; give a file name")
    add("out-scenario-empty", ["workload", "scenario", "{d}/ok.toml", "-o", ""], "-o: empty path")
    add("out-compare-empty", ["compare", "{d}/ok.toml", "-o", ""], "-o: empty path; give a directory")
    add("out-experiment-empty", ["experiment", "mzcache-ttft", "-o", ""], "-o: empty path")
    add("out-synth-empty", ["model", "synth", "", "--preset", "Qwen3-0.6B"], "-o: empty path")

    # --- compare, demo, experiment: their own numbers --------------------------------------------
    cmp = "compare {d}/ok.toml -o {out}/cmp "
    for id, opt, expect in [
            ("mem-4k", "--mem 4K", "--mem 4K: less than 16.0 MiB"),
            ("memcg-100", "--memcg-limit 100", "--memcg-limit 100: less than 16.0 MiB"),
            ("mem-both", "--mem 1G --memcg-limit 1G", "give --mem or --memcg-limit, not both"),
            ("requests-zero", "--requests 0", "--requests 0: must be at least 1"),
            ("requests-neg", "--requests -3", "--requests -3: must be at least 1"),
            ("paths-zero", "--paths 0", "--paths 0: must be at least 1"),
            ("paths-many", "--paths 100", "--paths 100: must be at most 64"),
            ("prompt-zero", "--prompt 0", "--prompt 0: must be at least 1"),
            ("decode-zero", "--decode 0", "--decode 0: must be at least 1"),
            ("swappiness", "--swappiness 300", "'--swappiness': 300 is not in the range 0<=x<=200"),
            ("policies", "--policies nope", "'--policies': 'nope' is not one of"),
            ("policies-twice", "--policies stock,stock", "listed twice"),
            ("zram-algo", "--zram foo:1G", "--zram 'foo:1G': unknown compressor 'foo'"),
            ("device", "--device nope", "unknown device 'nope'"),
            ("policy-param", "--policy-param 99999999999", "--policy-param 99999999999: must be at most")]:
        add("compare-" + id, cmp + opt, expect)
    add("compare-policies-empty", ["compare", "{d}/ok.toml", "-o", "{out}/cmp", "--policies", ""], "no policy given")
    add("compare-kind", "compare {d}/bad.csv -o {out}/cmp", "expected a model (.gguf) or a scenario (.toml)")
    add("compare-set-gguf", "compare {d}/ok.gguf --set seed=2 -o {out}/cmp", "--set applies to scenario files")
    add("compare-scenario-fifo", "compare {d}/fifo.toml -o {out}/cmp", "is a FIFO", True)
    add("compare-ctx-paths", "compare {d}/ok.gguf --ctx 16777216 --paths 2 -o {out}/cmp",
        "--ctx x --paths (the context's cells) 33554432: must be at most")
    add("demo-mem", "demo --mem 4K", "--mem 4K: less than 16.0 MiB")
    add("demo-mem-junk", "demo --mem lots", "--mem: cannot read 'lots' as a size")
    add("demo-scenario-fifo", "demo --scenario {d}/fifo.toml", "--scenario {d}/fifo.toml: is a FIFO", True)
    add("demo-scenario-dir", "demo --scenario {d}/dir.toml", "is a directory")
    add("demo-zram", "demo --zram foo:1G", "--zram 'foo:1G': unknown compressor 'foo'")
    add("demo-policies", "demo --policies nope", "'--policies': 'nope' is not one of")
    add("experiment-name", "experiment nope -o {out}/x", "unknown experiment 'nope'")
    add("experiment-set", "experiment mzcache-ttft --set nope -o {out}/x", "--set 'nope': expected KEY=VALUE")
    add("experiment-no-out", "experiment mzcache-ttft", "give -o DIR")

    # --- predict: limits and misleading messages -------------------------------------------------------
    pr = "predict {d}/ok.gguf --prompt 4 --decode 1 --ctx 64 "
    for id, opt, expect in [
            ("limit-100", "--mem-limit 100", "--mem-limit 100: less than one 4 KiB page"),
            ("limit-inf", "--mem-limit inf%", "--mem-limit 'inf%': expected a positive, finite percent"),
            ("limit-nan", "--mem-limit nan%", "--mem-limit 'nan%': expected a positive, finite percent"),
            ("limit-exp", "--mem-limit 1e400%", "--mem-limit '1e400%': expected a positive, finite percent"),
            ("limit-neg", "--mem-limit -5%", "expected a positive, finite percent"),
            ("limit-tiny-pct", "--mem-limit 0.0001%", "less than one 4 KiB page"),
            ("limit-huge-pct", "--mem-limit 1e300%", "more memory than a machine can have"),
            ("limit-junk", "--mem-limit abc%", "expected a percent like 60%"),
            ("limit-huge", "--mem-limit 99999999999T", "is more than 64T"),
            ("limit-two", "--mem-limit 1G,2G", "--mem-limit '1G,2G': give one limit"),
            ("flush-neg", "--mem-limit 1G --stats-flush-ms -1", "--stats-flush-ms -1: must be at least 0"),
            ("flush-nan", "--mem-limit 1G --stats-flush-ms nan", "--stats-flush-ms nan: expected a finite number"),
            ("phase-nan", "--mem-limit 1G --stats-flush-phase-ms nan", "--stats-flush-phase-ms nan: expected a finite"),
            ("phase-over", "--mem-limit 1G --stats-flush-ms 10 --stats-flush-phase-ms 20",
             "--stats-flush-phase-ms 20: expected 0..10"),
            ("threads-zero", "--mem-limit 1G --threads 0", "--threads 0: must be at least 1"),
            ("threads-many", "--mem-limit 1G --threads 1000", "--threads 1000: must be at most 64"),
            ("prompt-zero", "--mem-limit 1G --prompt 0", "--prompt 0: must be at least 1"),
            ("prompt-huge", "--mem-limit 1G --prompt 100000000", "must be at most 16,777,216"),
            ("decode-neg", "--mem-limit 1G --decode -1", "--decode -1: must be at least 0"),
            ("zram-algo", "--mem-limit 1G --zram foo:1G", "--zram 'foo:1G': unknown compressor 'foo'"),
            ("zram-zero", "--mem-limit 1G --zram lz4:0", "is zero"),
            ("policy", "--mem-limit 1G --policy nope", "'--policy': 'nope' is not one of"),
            ("swappiness", "--mem-limit 1G --swappiness 999", "'--swappiness': 999 is not in the range 0<=x<=200"),
            ("batch-zero", "--mem-limit 1G --batch 0", "--batch 0: must be at least 1"),
            ("kv-manager", "--mem-limit 1G --kv-manager nope", "'--kv-manager': 'nope' is not")]:
        add("predict-" + id, pr + opt, expect)
    add("predict-missing", "predict {d}/missing.gguf --prompt 4 --decode 1 --ctx 64 --mem-limit 1G", "no such file")

    # --- live commands: everything checked before the machine is touched --------------------------
    run = "run -o {out}/rd %s -- true"
    for id, opt, expect in [
            ("zram-algo", "--zram foo:1G", "unknown compressor 'foo'"),
            ("zram-zero", "--zram lz4:0", "is zero"),
            ("zram-huge", "--zram lz4:16T", "more than 4.0 TiB"),
            ("limit-huge", "--mem-limit 99999999999T", "is more than 64T"),
            ("limit-sub-page", "--mem-limit 100", "--mem-limit 100: less than one 4 KiB page"),
            ("interval-nan", "--interval nan", "--interval nan: expected a finite number"),
            ("interval-zero", "--interval 0", "--interval 0.0: expected a positive number"),
            ("interval-inf", "--interval inf", "--interval inf: expected a finite number"),
            ("memcg-neg", "--memcg-interval -1", "--memcg-interval -1: must be at least 0"),
            ("smaps-nan", "--smaps-interval nan", "--smaps-interval nan: expected a finite number"),
            ("swappiness", "--swappiness 300", "'--swappiness': 300 is not in the range 0<=x<=200")]:
        add("run-" + id, run % opt, expect, True)
    add("run-out-empty", ["run", "-o", "", "--", "true"], "-o: empty path; give a directory", True)
    add("run-out-proc", "run -o /proc/kmemsim-rd -- true", "cannot write in /proc", True)
    add("run-out-full", "run -o {d}/full -- true", "exists and is not empty", True)
    add("record-pid", "record --pid 0 -o {out}/rd", "--pid 0: must be at least 1", True)
    add("record-duration", "record --pid 1 --duration nan -o {out}/rd", "--duration nan: expected a finite", True)
    add("record-interval", "record --pid 1 --interval nan -o {out}/rd", "--interval nan", True)
    add("record-out", ["record", "--pid", "1", "-o", ""], "-o: empty path", True)
    va = "validate {d}/%s -o {out}/v %s"
    for id, model, opt, expect in [
            ("trunc", "trunc_data.gguf", "", "truncated GGUF"),
            ("zram", "ok.gguf", "--zram foo:1G", "unknown compressor 'foo'"),
            ("limit-nan", "ok.gguf", "--mem-limit nan%", "expected a positive, finite percent"),
            ("limit-100", "ok.gguf", "--mem-limit 100", "less than one 4 KiB page"),
            ("memcg-nan", "ok.gguf", "--memcg-interval nan", "--memcg-interval nan: expected a finite"),
            ("threads", "ok.gguf", "--threads 0", "--threads 0: must be at least 1"),
            ("fifo", "fifo.gguf", "", "is a FIFO"),
            ("out-proc", "ok.gguf", "", None)]:
        if id == "out-proc":
            add("validate-out-proc", "validate {d}/ok.gguf -o /proc/kmemsim-v", "cannot write in /proc", True)
            continue
        add("validate-" + id, (va % (model, opt)).split(), expect, True)
    il = "is-live {d}/%s -o {out}/v %s"
    for id, model, opt, expect in [
            ("trunc", "trunc_data.gguf", "", "truncated GGUF"),
            ("zram", "ok.gguf", "--zram foo:1G", "unknown compressor 'foo'"),
            ("limit", "ok.gguf", "--mem-limit 100", "less than one 4 KiB page"),
            ("blocks", "blocks_more.gguf", "", "'blk.2.attn_norm.weight' is missing")]:
        add("is-live-" + id, (il % (model, opt)).split(), expect, True)
    add("is-live-out", ["is-live", "{d}/ok.gguf", "-o", ""], "-o: empty path", True)
    for id, args, expect in [
            ("proc", "profile -o /proc/kmemsim.toml", "cannot write in /proc"),
            ("missing-dir", "profile -o {out}/no/p.toml", "directory {out}/no does not exist"),
            ("devnull", "profile -o {d}/null.toml", "is a character device"),
            ("dir", "profile -o {d}", "is a directory"),
            ("storage-dir", "profile -o {out}/p.toml --dir {out}/nowhere", "--dir {out}/nowhere: not a directory")]:
        add("profile-" + id, args, expect, True)
    add("profile-empty", ["profile", "-o", ""], "-o: empty path", True)
    return C


CASES = cases()
