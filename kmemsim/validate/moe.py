"""The MoE paging check on the live kernel: real llama.cpp (the reference child, child.py) on an MoE
GGUF under a memory cgroup and the recorder, with its experts paged as `page-cache` (plain mmap) or
`willneed` (llama.cpp #26003's madvise calls, issued by the child around unmodified llama.cpp from
its ffn_moe_topk callback), beside the prediction for the same run: the generator in that load mode
replaying the routing llama.cpp chose in the live run (`--moe-routing recorded:`), through
validate's own predict (the engine's baseline and llama.cpp's logged buffers). The measure is the
decode phase's storage reads per token: page-cache pages the model file gained (the recorder's
mm_filemap_add_to_page_cache records, phases.measured) against the emulator's (phases.predicted).

The loader around llama.cpp 0.3.36 cannot turn its load's MAP_POPULATE off, so both modes load the
whole file as it does (LlamaSession moe_populate=True) and part in decode only."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from ..core.atomic import atomic_write
from ..core.errors import InputError
from ..core.units import PAGE_SIZE
from ..workload.gguf_layout import read_layout
from ..workload.llama import routing
from . import phases
from .measure import engine_baseline, engine_warm_set, llama_probe, this_machine, warm_steps
from .predict import predict
from .reference import INTERVAL_S, reference_child

MODES = ("page-cache", "willneed")


def experts_json(model) -> dict:
    """Per layer its expert tensors as [file offset, bytes per expert], in graph order (gate, up,
    down): what the child's madvise calls cover."""
    L = read_layout(model)
    X = L.hparams.get("n_expert")
    if not X:
        raise InputError(f"{model}: expert_count is 0; the MoE check needs an MoE model "
                         "(kmemsim model synth --preset Qwen3-30B-A3B --layers 4)")
    out = {}
    for il in range(L.hparams["n_layer"]):
        out[il] = [[t.data_offset, t.n_bytes // X] for t in
                   (L.tensor(f"blk.{il}.ffn_{k}_exps.weight") for k in ("gate", "up", "down")) if t is not None]
    return {"n_expert": X, "layers": out}


def live(model, mode, prompt, decode, ctx, mem_limit, outdir, threads=2, zram="lz4:4G", swappiness=60) -> dict:
    """One recorded live run in `outdir`: the decode phase's model-file pages added, and the routing."""
    if mode not in MODES:
        raise InputError(f"MoE live mode {mode!r}: one of {', '.join(MODES)}")
    os.makedirs(outdir, exist_ok=True)
    atomic_write(os.path.join(outdir, "experts.json"), json.dumps(experts_json(model)))
    rc = reference_child(model, prompt, decode, ctx, mem_limit, outdir, 512, 512, threads, zram, swappiness,
                         INTERVAL_S, record=True, mode=f"moe-{mode}")
    with open(os.path.join(outdir, "llama_result.json")) as f:
        res = json.load(f)
    if rc != 0 or "tpot_s" not in res:
        raise RuntimeError(f"live MoE run {mode} in {outdir} failed (exit {rc})")
    per, aligned = phases.measured(os.path.join(outdir, "run"), res, model)
    starts, _ = phases.boundaries(os.path.join(outdir, "run"), res, model)
    fm = pd.read_parquet(os.path.join(outdir, "run", "raw", "filemap.parquet"))
    # the model's pages another task on the machine deleted in decode (a drop_caches: it takes the
    # unmapped clean folios, which willneed's DONTNEED leaves every used expert as)
    out = fm[(fm.kind == "delete") & (fm.ino == os.stat(model).st_ino) & (fm.tracked == 0)
             & (fm.t >= starts[2]) & (fm.t < starts[3])]
    rows = [(il, r) for il, r in res["routing"]]
    path = os.path.join(outdir, "routing.npz")
    atomic_write(path, lambda tmp: routing.save_recording(tmp, rows, experts_json(model)["n_expert"]))
    return {"mode": mode, "decode_pages_added": int(per.loc["decode", "file_pages_added"]),
            "prompt_pages_added": int(per.loc["prompt", "file_pages_added"]), "aligned": aligned,
            "routing": path, "madvise_calls": res.get("madvise_calls", 0), "tpot_s": res["tpot_s"],
            "outside_deleted_pages": int(np.left_shift(1, out.order.to_numpy().astype(np.int64)).sum())}


def predicted(model, mode, prompt, decode, ctx, mem_limit, routing_path, threads=2, zram="lz4:4G",
              swappiness=60) -> dict:
    """The emulator's decode-phase model-file pages added for the same run: validate's predict (the
    engine's baseline, llama.cpp's buffers, the engine's warm set, each measured once per boot)
    with the load mode and the live run's routing."""
    r = predict(model, prompt, decode, ctx, mem_limit, threads=threads, zram=zram, swappiness=swappiness,
                engine=engine_baseline(), probe=llama_probe(model, ctx, 512, 512, threads),
                warm=engine_warm_set(model, prompt, ctx, 512, 512, threads, warm_steps(decode)),
                keep_result=True, device=this_machine(), recorded=True,
                session_kw={"load_mode": mode, "moe_routing": f"recorded:{routing_path}", "moe_populate": True})
    per = phases.predicted(r["_result"])
    return {"mode": mode, "decode_pages_added": int(per.loc["decode", "file_pages_added"]),
            "prompt_pages_added": int(per.loc["prompt", "file_pages_added"]), "tpot_s": r["tpot_s"]}


def check(model, prompt, decode, ctx, fraction, outdir, modes=MODES, threads=2) -> list[dict]:
    """Each mode live and predicted at a memcg limit of `fraction` of the model file: rows with the
    decode phase's storage reads per token on both sides and their relative error, and the model's
    pages another task deleted meanwhile (outside_deleted_pages: the run was disturbed)."""
    limit = int(fraction * os.path.getsize(model))
    out = []
    for mode in modes:
        lv = live(model, mode, prompt, decode, ctx, limit, os.path.join(outdir, mode), threads)
        pr = predicted(model, mode, prompt, decode, ctx, limit, lv["routing"], threads)
        per_tok = lambda d: d["decode_pages_added"] * PAGE_SIZE / decode
        out.append({"mode": mode, "mem_limit_bytes": limit, "live_bytes_per_token": per_tok(lv),
                    "predicted_bytes_per_token": per_tok(pr),
                    "rel_error": per_tok(pr) / max(1.0, per_tok(lv)) - 1.0,
                    "live_tpot_s": lv["tpot_s"], "predicted_tpot_s": pr["tpot_s"],
                    "madvise_calls": lv["madvise_calls"], "aligned": lv["aligned"],
                    "outside_deleted_pages": lv["outside_deleted_pages"]})
    return out
