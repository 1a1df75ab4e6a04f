"""Multitasking scenarios: apps switching in the foreground beside on-device LLM sessions.

A scenario is an editable TOML file (docs/scenarios.md; bundled ones in kmemsim/data/scenarios/).
schema.py parses and validates it, timeline.py plans the timeline (which app is foreground when, when
each LLM request arrives and how long it is) and builder.py turns the plan into one Trace:

- every app is a process (PROC_START with its oom_score_adj, PROC_EXIT when killed), with its
  anonymous regions (MMAP anon, PageClass for zram) and file regions (MMAP of the APK, libraries,
  assets; files with the same path share one page cache);
- a cold start touches the app's whole working set (WRITE of anon heaps, READ of code/resources);
  a warm switch re-touches its hot part; while foreground the app touches a `churn` window of each
  region every `tick` seconds; backgrounded apps are idle (no events);
- lmkd priorities: oom_score_adj 0 foreground, 100 visible, 700 previous, 900+ cached (Android's
  ProcessList values); changes are SET_OOM_ADJ events on the app's pid;
- switch patterns Random, Markov, Gaussian (LLMS §2.6) or the fixed ten-app round (mzCache Fig 15,
  scripts/mzcache/record_demo_rounds.sh);
- LLM sessions (contexts) with Poisson request arrivals, delta lengths from LLMS Table 3, and N
  speculative candidate paths (N KV sequences) come from kmemsim.workload.llama and are merged
  onto the same timeline.

Kills the emulator makes feed back (relaunch.py): a killed app cold-starts at its next switch.

Randomness comes only from numpy Generators seeded by the file's `seed`, so one file gives one trace.
Python loops here run per app, per switch and per request, never per page.
"""
from .builder import build, build_llm, llm_calls, model_layout
from .relaunch import replay as replay_relaunching
from .timeline import Chooser, Plan, plan, plan_dict, sequence
from .schema import APP_PID0, LLM_PID, PATTERNS, TASKS, Scenario, load, parse

__all__ = ["Scenario", "load", "parse", "plan", "Plan", "plan_dict", "build", "build_llm", "llm_calls",
           "model_layout", "replay_relaunching", "sequence", "Chooser", "PATTERNS", "TASKS", "LLM_PID", "APP_PID0"]
