"""The runner: tasks mapped over a Dask cluster (dask.distributed) or run one after another in this
process, behind one small interface, so `kmemsim sweep` and `kmemsim experiment --scheduler` share it.

    with Runner("local") as r:               # a LocalCluster on this machine: one worker process per core
        a = r.submit(build, spec)            # futures; a future passed as an argument is its result
        bs = [r.submit(replay, a, p) for p in points]
        for f in r.as_completed(bs):         # in the order they finish
            f.result()

`scheduler`: "local" (a LocalCluster, `workers` processes of one thread each: the C core releases no
GIL it does not hold, and processes keep each replay's memory its own), "serial" (this process, in
submission order: the same points one after another, the baseline a cluster is measured against), or
an address such as tcp://HOST:PORT of a running `dask scheduler` whose workers have kmemsim installed
and see the workload's file at the same path."""
from __future__ import annotations

import logging
import os

from ..core.errors import InputError

SERIAL, LOCAL = "serial", "local"


class SerialFuture:
    """A task run when its result is first asked for, in this process."""

    def __init__(self, fn, args, kwargs, key):
        self.fn, self.args, self.kwargs, self.key = fn, args, kwargs, key
        self.done = False
        self.value = self.error = None

    def result(self):
        if not self.done:
            try:
                args = [a.result() if isinstance(a, SerialFuture) else a for a in self.args]
                self.value = self.fn(*args, **self.kwargs)
            except Exception as e:          # noqa: BLE001 - kept and raised to whoever asks, as Dask does
                self.error = e
            self.done = True
            self.args = self.kwargs = None  # what it needed can go
        if self.error is not None:
            raise self.error
        return self.value

    def cancel(self):
        self.done = True


def check_scheduler(scheduler) -> str:
    s = str(scheduler or LOCAL)
    if s in (SERIAL, LOCAL) or "://" in s:
        return s
    raise InputError(f"--scheduler {scheduler!r}: expected local, serial or an address like tcp://HOST:8786")


class Runner:
    def __init__(self, scheduler=LOCAL, workers=None):
        self.scheduler = check_scheduler(scheduler)
        if workers is not None and int(workers) < 1:
            raise InputError(f"--workers must be at least 1 (got {workers})")
        self.n = int(workers) if workers else (os.cpu_count() or 1)
        self.client = self.cluster = None

    @property
    def serial(self) -> bool:
        return self.scheduler == SERIAL

    def __enter__(self):
        if self.serial:
            return self
        # here: Dask takes a second to import, and serial runs and `kmemsim --help` need none of it
        import dask
        from distributed import Client, LocalCluster
        # Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_ set, which turns off glibc's dynamic
        # mmap threshold: every large allocation of a replay is then mmapped and faulted in afresh
        # (a replay ran 5x slower); the other variables it sets (one BLAS thread) are kept
        env = {k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items()
               if not k.startswith("MALLOC_")}
        # and its statistical profiler, which walks the running task's stack every 10 ms under the
        # GIL, off: a replay's Python steps (pandas) ran 2-3x slower on a worker than in a process
        dask.config.set({"logging.distributed": "error", "distributed.nanny.pre-spawn-environ": env,
                         "distributed.worker.profile.enabled": False})
        for name in ("distributed", "distributed.worker", "distributed.scheduler", "distributed.nanny"):
            logging.getLogger(name).setLevel(logging.ERROR)
        if self.scheduler == LOCAL:
            self.cluster = LocalCluster(n_workers=self.n, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=logging.ERROR)
            self.client = Client(self.cluster)
        else:
            try:
                self.client = Client(self.scheduler, timeout="10s")
            except (OSError, TimeoutError) as e:
                raise InputError(f"--scheduler {self.scheduler}: cannot reach it ({e})") from None
            self.n = max(1, sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values()))
        return self

    def __exit__(self, *exc):
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        self.client = self.cluster = None

    @property
    def workers(self) -> int:
        """How many tasks run at once."""
        return 1 if self.serial else self.n

    def submit(self, fn, *args, key=None, **kwargs):
        if self.serial:
            return SerialFuture(fn, args, kwargs, key)
        return self.client.submit(fn, *args, key=key, pure=False, **kwargs)

    def as_completed(self, futures):
        if self.serial:
            yield from futures
            return
        # here: imported with the client (__enter__)
        from distributed import as_completed
        yield from as_completed(futures)

    def cancel(self, futures):
        if self.serial:
            for f in futures:
                f.cancel()
        elif futures:
            self.client.cancel(list(futures))

    def describe(self) -> str:
        if self.serial:
            return "serial (this process)"
        if self.scheduler == LOCAL:
            return f"Dask LocalCluster, {self.n} worker processes"
        return f"Dask scheduler {self.scheduler}, {self.n} worker threads"
