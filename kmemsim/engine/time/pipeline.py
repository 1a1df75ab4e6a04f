"""Pipeline time: overlapped streams of tasks on shared resources; a request's time is its critical path.

serial.py charges time as counts x costs, one phase after another. An inference engine that overlaps
flash reads, decompression, allocation and compute (mzCache, LLMS, DynaKV) takes the time of its
critical path instead. This is the model of that:

- Resources. The device's flash (`Pipeline.flash()`, one per pipeline): the reads in flight share it
  by processor sharing, as c_ext/bio.c shares its device between the bios in flight: each of the n
  reads in flight at a moment progresses at 1/n of the rate it would have alone, so two equal reads
  started together end together, each after twice its time alone. A pool of CPU cores
  (`cores(name, n)`) or any other resource with a number of slots (`resource(name, slots)`, e.g. a
  GPU with 1): a running task takes one slot; ready tasks beyond the free slots wait, first ready
  first served (ties: the task created first).
- Streams. A stream is a queue of tasks on one resource run in order (a worker thread, the GPU's
  command queue): a task starts when the previous task of its stream has ended, all its dependencies
  (`after=[...]`, tasks of any stream of the pipeline) have ended, and its resource has a free slot.
  A stream runs one task at a time: to use n cores of a pool at once, give it n streams.
- Durations. `Stream.work(name, seconds)`: a fixed duration (compute, decompression, allocation: the
  caller computes them from the device profile). `Stream.read(name, nbytes, io_bytes, queue_depth)`,
  on a stream of the flash: a read of nbytes in I/Os of io_bytes, queue_depth of them in flight. Its
  time alone is nbytes / Device.flash_throughput(S, q) with S = min(io_bytes, nbytes) and q =
  min(queue_depth, its number of I/Os) (a read cannot keep more I/Os in flight than it has), and no
  less than one I/O's QD1 time latency(S) + S / bandwidth(S); sharing the flash stretches it. A
  `work` task on a flash stream is flash time too: its seconds are its time alone, shared likewise.
  Simplification: the flash is shared in time, not by queue depth: two reads at queue depth 1 in
  flight together share one read's rate, where a real device would serve them at up to twice it.
- The result (`Schedule`): each task's start and end, the makespan, busy time per stream, and the
  critical path: from the task that ends last (on a tie, the one created last), back through each
  task's predecessor that ended last before it started (its stream's previous task, a dependency,
  or the task whose end freed the slot it waited for; on a tie, in that order), to a task that
  started at 0. Every task starts when its last constraint ends, so the path has no gaps: its
  tasks' durations add up to the makespan. The reads that shared the flash with a read on the path
  are not on it (they made that read longer).

The event loop keeps fixed-duration tasks' ends in a heap and the flash's reads in virtual time (the
service each read in flight has had alone-equivalent, advancing at 1/n per second with n in flight),
so a read starting or ending costs O(log n) and 100,000 tasks run in a fraction of a second.

`serial(pt)` is serial.py's model as the one-stream case: each phase occurrence's time_s in order.
"""
from __future__ import annotations

import heapq
import math
from collections import deque

from ...core.errors import InputError

INF = math.inf


class Resource:
    """The flash, a pool of cores, or another resource with a number of slots."""
    __slots__ = ("pipeline", "name", "kind", "slots", "index")

    def __init__(self, pipeline, name, kind, slots, index):
        self.pipeline, self.name, self.kind, self.slots, self.index = pipeline, name, kind, slots, index

    def __repr__(self):
        return f"<{self.kind} {self.name!r}" + (f" x{self.slots}>" if self.kind != "flash" else ">")


class Task:
    """One task: `seconds` is its duration (a read's: alone on the flash); a read also has nbytes,
    io_bytes and queue_depth (None for a fixed-duration task)."""
    __slots__ = ("name", "stream", "seconds", "nbytes", "io_bytes", "queue_depth", "after", "index")

    def __init__(self, name, stream, seconds, after, index, nbytes=None, io_bytes=None, queue_depth=None):
        self.name, self.stream, self.seconds, self.after, self.index = name, stream, seconds, after, index
        self.nbytes, self.io_bytes, self.queue_depth = nbytes, io_bytes, queue_depth

    def __repr__(self):
        what = (f"{self.nbytes} B read" if self.nbytes is not None else f"{self.seconds:.6g} s")
        return f"<Task {self.stream.name}:{self.name!r} {what}>"


def _number(v, what, integer=False):
    """v as a float (an int if integer), or an InputError naming what."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and int(v) != v):
        raise InputError(f"{what} must be {'an integer' if integer else 'a number'}, got {v!r}")
    if not math.isfinite(v):
        raise InputError(f"{what} must be finite, got {v!r}")
    return int(v) if integer else float(v)


class Stream:
    """Tasks on one resource, run in order."""
    __slots__ = ("pipeline", "name", "resource", "tasks")

    def __init__(self, pipeline, name, resource):
        self.pipeline, self.name, self.resource, self.tasks = pipeline, name, resource, []

    def __repr__(self):
        return f"<Stream {self.name!r} on {self.resource!r}, {len(self.tasks)} tasks>"

    def _after(self, after, where):
        p = self.pipeline
        deps = tuple(after)
        for d in deps:
            if not isinstance(d, Task):
                raise InputError(f"{where}: after= takes tasks, got {d!r}")
            if d.stream.pipeline is not p:
                raise InputError(f"{where}: depends on {d.stream.name}:{d.name!r}, a task of another pipeline")
        return deps

    def work(self, name, seconds, after=()) -> Task:
        """A task of a fixed duration (on the flash: its time alone, shared with the reads in flight)."""
        where = f"stream {self.name!r} task {name!r}"
        self.pipeline.check_open(where)
        s = _number(seconds, f"{where}: seconds")
        if s < 0:
            raise InputError(f"{where}: seconds must be >= 0, got {seconds!r}")
        return self.pipeline.add(Task(name, self, s, self._after(after, where), 0))

    def read(self, name, nbytes, io_bytes, queue_depth=1, after=()) -> Task:
        """A flash read of nbytes in I/Os of io_bytes, queue_depth of them in flight."""
        where = f"stream {self.name!r} read {name!r}"
        p = self.pipeline
        p.check_open(where)
        if self.resource.kind != "flash":
            raise InputError(f"{where}: read() needs a stream on the flash (Pipeline.flash()), "
                             f"this one is on {self.resource.name!r}")
        nb = _number(nbytes, f"{where}: nbytes")
        io = _number(io_bytes, f"{where}: io_bytes")
        qd = _number(queue_depth, f"{where}: queue_depth", integer=True)
        if nb < 0:
            raise InputError(f"{where}: nbytes must be >= 0, got {nbytes!r}")
        if io <= 0:
            raise InputError(f"{where}: io_bytes must be > 0, got {io_bytes!r}")
        if qd < 1:
            raise InputError(f"{where}: queue_depth must be >= 1, got {queue_depth!r}")
        deps = self._after(after, where)
        return p.add(Task(name, self, p.read_seconds(nb, io, qd), deps, 0, nbytes, io_bytes, qd))


class Schedule:
    """What a pipeline's run gives: per task its start and end, the makespan, the critical path."""

    def __init__(self, tasks, streams, ready, start, end, cause):
        self.tasks = tasks
        self._streams = streams
        self._ready, self._start, self._end, self._cause = ready, start, end, cause
        self.makespan = max(end) if end else 0.0
        path = []
        if tasks:
            # the task that ends last (of several ending at the makespan, the one created last)
            k = max(range(len(end)), key=lambda i: (end[i], i))
            while k >= 0:
                path.append(tasks[k])
                k = cause[k]
        self.critical_path = path[::-1]

    def _index(self, task):
        if not isinstance(task, Task) or task.index >= len(self.tasks) or self.tasks[task.index] is not task:
            raise InputError(f"{task!r} is not a task of this schedule's pipeline")
        return task.index

    def start(self, task) -> float:
        return self._start[self._index(task)]

    def end(self, task) -> float:
        return self._end[self._index(task)]

    def ready(self, task) -> float:
        """When its stream's previous task and its dependencies had ended (start - ready: its wait
        for a slot of its resource)."""
        return self._ready[self._index(task)]

    def busy(self, stream) -> float:
        """Seconds the stream's tasks ran (a read: its time on the shared flash), by name or Stream."""
        name = stream.name if isinstance(stream, Stream) else stream
        if name not in self._streams:
            raise InputError(f"no stream {name!r} (streams: {', '.join(self._streams) or 'none'})")
        s, e = self._start, self._end
        return float(sum(e[t.index] - s[t.index] for t in self._streams[name].tasks))


class Pipeline:
    """Streams of tasks on the flash, pools of cores and other resources (see the module's doc)."""

    def __init__(self, device=None):
        self.device = device              # kmemsim.engine.time.device.Device (reads need it)
        self._resources = {}
        self._streams = {}
        self._tasks = []
        self._flash = None
        self._ran = False
        self._read_s = {}                 # (nbytes, io_bytes, queue_depth) -> time alone: reads repeat

    # --- building ---------------------------------------------------------------------------------
    def check_open(self, where):
        if self._ran:
            raise InputError(f"{where}: the pipeline has run; build a new Pipeline")

    def _resource(self, name, kind, slots):
        self.check_open(f"{kind} {name!r}")
        if not isinstance(name, str) or not name:
            raise InputError(f"a resource needs a name, got {name!r}")
        n = _number(slots, f"{kind} {name!r}: slots", integer=True)
        if n < 1:
            raise InputError(f"{kind} {name!r}: needs at least 1 slot, got {slots!r}")
        if name in self._resources:
            raise InputError(f"resource {name!r} exists already in this pipeline")
        r = Resource(self, name, kind, n, len(self._resources))
        self._resources[name] = r
        return r

    def flash(self) -> Resource:
        """The device's storage (one per pipeline: again, the same one)."""
        if self._flash is None:
            if self.device is None:
                raise InputError("Pipeline.flash(): the pipeline has no device (Pipeline(device))")
            self._flash = self._resource("flash", "flash", 1)
        return self._flash

    def cores(self, name, n) -> Resource:
        """A pool of n CPU cores: a task takes one."""
        return self._resource(name, "cores", n)

    def resource(self, name, slots=1) -> Resource:
        """Any other resource with a number of slots (a GPU: 1)."""
        return self._resource(name, "resource", slots)

    def stream(self, name, resource) -> Stream:
        """A stream of tasks run in order on resource."""
        self.check_open(f"stream {name!r}")
        if not isinstance(resource, Resource) or resource.pipeline is not self:
            raise InputError(f"stream {name!r}: {resource!r} is not a resource of this pipeline")
        if name in self._streams:
            raise InputError(f"stream {name!r} exists already in this pipeline")
        s = Stream(self, name, resource)
        self._streams[name] = s
        return s

    def add(self, task) -> Task:
        task.index = len(self._tasks)
        self._tasks.append(task)
        task.stream.tasks.append(task)
        return task

    def read_seconds(self, nbytes, io_bytes, queue_depth) -> float:
        """A read's time alone on the flash (the module's doc): nbytes at the device's throughput for
        I/Os of S = min(io_bytes, nbytes) bytes, min(queue_depth, I/Os) in flight, and at least one
        I/O's QD1 time."""
        if nbytes <= 0:
            return 0.0
        key = (nbytes, io_bytes, queue_depth)
        got = self._read_s.get(key)
        if got is not None:
            return got
        d = self.device
        s = min(io_bytes, nbytes)
        q = min(queue_depth, math.ceil(nbytes / s))
        qd1 = float(d.read_latency_s(s)) + s / float(d.read_bandwidth(s))
        got = self._read_s[key] = max(nbytes / d.flash_throughput(s, q), qd1)
        return got

    # --- running ----------------------------------------------------------------------------------
    def run(self) -> Schedule:
        """Run the pipeline (once) and return its Schedule."""
        if self._ran:
            raise InputError("Pipeline.run(): the pipeline has run already; build a new one")
        self._ran = True
        tasks = self._tasks
        n = len(tasks)
        dur = [t.seconds for t in tasks]
        flash = self._flash
        res = [t.stream.resource for t in tasks]
        is_flash = [r is flash for r in res]
        rix = [r.index for r in res]
        free = [r.slots for r in self._resources.values()]
        waiting = [deque() for _ in self._resources]

        # prerequisites: the stream's previous task and the dependencies; successors likewise
        nwait = [len(t.after) for t in tasks]
        succ = [None] * n
        prev = [-1] * n
        for s in self._streams.values():
            ts = s.tasks
            for a, b in zip(ts, ts[1:]):
                prev[b.index] = a.index
                nwait[b.index] += 1
        for t in tasks:
            for d in t.after:
                j = d.index
                if succ[j] is None:
                    succ[j] = [t.index]
                else:
                    succ[j].append(t.index)
        nxt = [-1] * n
        for i, p in enumerate(prev):
            if p >= 0:
                nxt[p] = i

        ready = [0.0] * n
        start = [0.0] * n
        end = [0.0] * n
        rcause = [-1] * n                 # the task whose end gave it its slot
        events = []                       # (end, task) of fixed-duration tasks running
        # the flash: virtual time fv advances at 1/fn per second with fn reads in flight; a read
        # ends when fv reaches its start's fv plus its time alone
        fheap = []
        fn = 0
        fv = 0.0
        ft = 0.0
        push, pop = heapq.heappush, heapq.heappop

        def make_ready(i, t):
            nonlocal fn, fv, ft
            ready[i] = t
            if is_flash[i]:
                if fn:
                    fv += (t - ft) / fn
                ft = t
                start[i] = t
                push(fheap, (fv + dur[i], i))
                fn += 1
                return
            r = rix[i]
            if free[r]:
                free[r] -= 1
                start[i] = t
                push(events, (t + dur[i], i))
            else:
                waiting[r].append(i)

        def finish(i, t):
            end[i] = t
            if not is_flash[i]:
                r = rix[i]
                w = waiting[r]
                if w:
                    j = w.popleft()
                    rcause[j] = i
                    start[j] = t
                    push(events, (t + dur[j], j))
                else:
                    free[r] += 1
            j = nxt[i]
            if j >= 0:
                nwait[j] -= 1
                if not nwait[j]:
                    make_ready(j, t)
            ss = succ[i]
            if ss is not None:
                for j in ss:
                    nwait[j] -= 1
                    if not nwait[j]:
                        make_ready(j, t)

        for i in range(n):
            if not nwait[i]:
                make_ready(i, 0.0)
        now = 0.0
        while events or fheap:
            te = events[0][0] if events else INF
            if fheap:
                vf = fheap[0][0]
                tf = max(ft + (vf - fv) * fn, ft, now)
            else:
                tf = INF
            if tf < te:
                now = tf
                fv, ft = max(vf, fv), tf
                done = []
                while fheap and fheap[0][0] <= fv:
                    done.append(pop(fheap)[1])
                fn -= len(done)
                for i in done:
                    finish(i, tf)
            else:
                now, i = pop(events)
                finish(i, now)

        # each task's predecessor on the critical path: the one that ended last before it started
        cause = [-1] * n
        for i, t in enumerate(tasks):
            best, bt = prev[i], (end[prev[i]] if prev[i] >= 0 else -INF)
            for d in t.after:
                if end[d.index] > bt:
                    best, bt = d.index, end[d.index]
            r = rcause[i]
            if r >= 0 and end[r] > bt:
                best = r
            cause[i] = best
        return Schedule(tasks, dict(self._streams), ready, start, end, cause)


def serial(pt) -> Schedule:
    """serial.py's model as a pipeline: one stream whose tasks are pt's phase occurrences (from
    serial.phase_times), each taking its time_s, in order. Its makespan is pt["time_s"].sum()."""
    p = Pipeline()
    s = p.stream("serial", p.resource("cpu", 1))
    for pid, name, sec in zip(pt.index, pt["name"], pt["time_s"]):
        s.work(f"#{pid} {name}", float(sec))
    return p.run()
