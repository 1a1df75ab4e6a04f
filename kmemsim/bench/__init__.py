"""`make bench` (replay.py: the core's throughput against libCacheSim) and `make bench-record`
(record.py: the recorder's overhead on real llama.cpp)."""
__all__ = ["record", "replay"]
