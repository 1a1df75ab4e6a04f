/* The consumer side of a BPF ring buffer (kernel/bpf/ringbuf.c), as libbpf's ringbuf_process_ring()
 * does it but copying the records out in bulk instead of calling back per record: the recorder's
 * probes fire millions of times a run, and a Python call per record took a CPU from the run it
 * recorded. Acquire/release as the kernel's producer (bpf_ringbuf_commit()) expects. */
#include <string.h>
#include "kmemsim.h"

#define BPF_RINGBUF_BUSY_BIT    (1U << 31)
#define BPF_RINGBUF_DISCARD_BIT (1U << 30)
#define BPF_RINGBUF_HDR_SZ      8

int64_t km_ringbuf_drain(uint64_t *consumer_pos, const uint64_t *producer_pos, const uint8_t *data,
                         uint64_t mask, uint32_t rec, uint8_t *out, int64_t cap)
{
    uint64_t cons = __atomic_load_n(consumer_pos, __ATOMIC_ACQUIRE);
    uint64_t prod = __atomic_load_n(producer_pos, __ATOMIC_ACQUIRE);
    int64_t n = 0;
    while (cons < prod && n < cap) {
        const uint8_t *hdr = data + (cons & mask);
        uint32_t len = __atomic_load_n((const uint32_t *)hdr, __ATOMIC_ACQUIRE);
        if (len & BPF_RINGBUF_BUSY_BIT)         /* reserved, not yet committed */
            break;
        uint32_t size = len & ~(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT);
        if (size != rec)                        /* a program wrote another struct: a bug in bpf/ */
            return -1;
        if (!(len & BPF_RINGBUF_DISCARD_BIT))   /* the data is mapped twice: a record never wraps */
            memcpy(out + (size_t)n++ * rec, hdr + BPF_RINGBUF_HDR_SZ, rec);
        cons += (size + BPF_RINGBUF_HDR_SZ + 7) & ~7ULL;
    }
    __atomic_store_n(consumer_pos, cons, __ATOMIC_RELEASE);
    return n;
}
