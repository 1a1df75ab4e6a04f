"""The emulator against the live kernel: the reference llama.cpp run (child.py, reference.py), the
engine's own footprint measured for it (measure.py), its prediction (predict.py), both split at its
phases (phases.py), scored (score.py) and tabled (markdown.py) by `kmemsim validate` (run.py); and
IS applied to a live llama.cpp process (live_is.py)."""
from .child import mapped_file_pages, reference_prompt
from .markdown import grid_markdown, score_markdown
from .measure import PROFILE, engine_baseline, engine_warm_set, llama_probe, referenced_pages
from .reference import METRICS, UNRECORDED, child_script, parse_limits
from .run import validate
from .scoring import BOUNDS, rel_error, score, within

__all__ = ["validate", "METRICS", "BOUNDS", "UNRECORDED", "PROFILE", "within", "rel_error", "score",
           "score_markdown", "grid_markdown", "parse_limits", "child_script", "reference_prompt",
           "mapped_file_pages", "referenced_pages", "engine_baseline", "llama_probe", "engine_warm_set"]
