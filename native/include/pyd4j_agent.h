/*
 * pyd4j side-agent: executes SuperNeurons-style plans by swapping buffers between a device
 * arena and a pinned host pool, with the copies on their own streams so that they overlap
 * compute.
 *
 * The same C ABI is built two ways (see native/CMakeLists.txt):
 *   - CUDA build: the device arena is one cudaMalloc, the host pool one cudaMallocHost, the
 *     compute/offload/prefetch streams are non-blocking CUDA streams, ordering uses
 *     cudaEventRecord + cudaStreamWaitEvent, copies are cudaMemcpyAsync on the offload
 *     (device->host) and prefetch (host->device) streams only.
 *   - host build (no CUDA toolkit): the "device" arena and the host pool are host memory, the
 *     offload and prefetch streams are worker threads with FIFO queues, events are completion
 *     flags; the compute stream is the calling thread. Ordering semantics are the same.
 *
 * Memory model
 *   Both pools are allocated once at pyd4j_agent_create and never grown. Blocks are carved
 *   first-fit in address order and coalesced with free neighbours on release. Every block is
 *   aligned to PYD4J_AGENT_ALIGNMENT bytes and its size is rounded up to that alignment; the
 *   "in use" and "peak" statistics count rounded sizes.
 *
 *   Releases are stream-ordered (like cudaFreeAsync): a block whose contents an in-flight copy
 *   still reads or writes is returned to the free list at once, tagged with that copy's
 *   completion event; whoever is handed that memory next (the compute stream for
 *   pyd4j_agent_alloc, the prefetch stream for pyd4j_agent_prefetch, the offload stream for a
 *   host slot) waits for the event on its own stream. So peak accounting is deterministic
 *   (it depends on the call sequence only, never on copy timing) and no call blocks the host
 *   except pyd4j_agent_wait, pyd4j_agent_synchronize, and -- in the host build only, where the
 *   compute stream is the calling thread -- an allocation that reuses memory still being read.
 *
 * Buffer states (pyd4j_agent_buffer_info_t.state)
 *   RESIDENT   device copy valid (after alloc, or after a prefetch has been issued)
 *   HOST       no device block (offload with release=1, or release_device after an offload);
 *              the contents live in the host slot. Prefetch brings them back.
 *   RESERVED   a device block is allocated again (reserve_device) but not yet filled; prefetch
 *              fills it. This lets an executor account the device block at the point its plan
 *              allocates it, and start the copy later.
 *   The device block and the host slot have independent lifetimes: release_device drops the
 *   first, drop_host the second, free both.
 *   A buffer registered with pyd4j_agent_register_external (an ND4J workspace, a CuPy array)
 *   keeps its own address: "release" leaves the memory with its owner and prefetch copies the
 *   contents back to the same address -- or, after pyd4j_agent_rebind_external, to new memory
 *   of the same size (an owner that gave the old memory back and allocated a fresh array).
 *
 * Errors: every function returns PYD4J_AGENT_OK (0) or an error code; the message of the last
 * error on the calling thread is returned by pyd4j_agent_last_error().
 *
 * Threading: calls on one agent are serialized by an internal mutex; waits drop it while they
 * block.
 */
#ifndef PYD4J_AGENT_H
#define PYD4J_AGENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define PYD4J_AGENT_API __declspec(dllexport)
#else
#define PYD4J_AGENT_API __attribute__((visibility("default")))
#endif

#define PYD4J_AGENT_ABI_VERSION 3 /* 3: pyd4j_agent_rebind_external */
#define PYD4J_AGENT_ALIGNMENT 256

typedef enum {
  PYD4J_AGENT_OK = 0,
  PYD4J_AGENT_ERR_INVALID_ARGUMENT = 1,
  PYD4J_AGENT_ERR_OUT_OF_DEVICE_MEMORY = 2, /* device arena has no free block that large */
  PYD4J_AGENT_ERR_OUT_OF_HOST_POOL = 3,     /* pinned host pool has no free block that large */
  PYD4J_AGENT_ERR_UNKNOWN_BUFFER = 4,       /* buffer id was never registered or already freed */
  PYD4J_AGENT_ERR_BAD_STATE = 5,            /* e.g. prefetch of a buffer that is resident */
  PYD4J_AGENT_ERR_CUDA = 6,                 /* a CUDA runtime call failed */
  PYD4J_AGENT_ERR_SYSTEM = 7,               /* host allocation or thread creation failed */
  PYD4J_AGENT_ERR_NOT_SUPPORTED = 8         /* feature not present in this build */
} pyd4j_agent_status;

typedef enum {
  PYD4J_AGENT_RESIDENT = 0,
  PYD4J_AGENT_HOST = 1,
  PYD4J_AGENT_RESERVED = 2
} pyd4j_agent_state;

typedef enum {
  PYD4J_AGENT_STREAM_COMPUTE = 0,
  PYD4J_AGENT_STREAM_OFFLOAD = 1,
  PYD4J_AGENT_STREAM_PREFETCH = 2
} pyd4j_agent_stream;

typedef enum {
  PYD4J_AGENT_DEVICE_TO_HOST = 0,
  PYD4J_AGENT_HOST_TO_DEVICE = 1
} pyd4j_agent_direction;

typedef struct pyd4j_agent pyd4j_agent; /* opaque */

typedef struct {
  uint64_t size;        /* requested bytes */
  uint64_t reserved;    /* bytes held in the arena (size rounded up to the alignment), 0 when HOST
                           or external */
  uint32_t state;       /* pyd4j_agent_state */
  uint32_t external;    /* 1 if registered with pyd4j_agent_register_external */
  uint32_t pending;     /* 1 if a copy on this buffer may still be in flight */
  uint32_t has_host;    /* 1 if a host slot holds (or will hold) a copy of the contents */
  void* device_ptr;     /* NULL when state == HOST and the buffer is not external */
  void* host_ptr;       /* host slot in the pinned pool, NULL if none */
} pyd4j_agent_buffer_info_t;

/* All fields are 8 bytes wide: the layout is the same for every compiler and for ctypes. */
typedef struct {
  uint64_t device_capacity;      /* arena bytes */
  uint64_t device_in_use;        /* bytes held by blocks (aligned sizes) */
  uint64_t device_peak;          /* max of device_in_use since create / reset_peak */
  uint64_t device_largest_free;  /* largest free block */
  uint64_t host_capacity;        /* pinned pool bytes */
  uint64_t host_in_use;
  uint64_t host_peak;
  uint64_t bytes_offloaded;      /* device -> host bytes copied (requested sizes) */
  uint64_t bytes_prefetched;     /* host -> device bytes copied */
  uint64_t n_offloads;
  uint64_t n_prefetches;
  uint64_t n_buffers;            /* live registered buffers */
  double offload_seconds;        /* sum of offload copy durations */
  double prefetch_seconds;       /* sum of prefetch copy durations */
  double copy_busy_seconds;      /* measure of the union of all copy intervals */
  double compute_seconds;        /* measure of the union of marked compute intervals */
  double overlap_seconds;        /* measure of (union of copy intervals) ∩ (union of compute
                                    intervals): the time copies ran while compute ran */
  double wait_seconds;           /* host time spent blocked in wait/synchronize */
  uint64_t device_high_water;    /* highest arena offset ever in use (end of the highest block):
                                    the arena size this run really needed, fragmentation
                                    included; >= device_peak */
  uint64_t device_limit;         /* see pyd4j_agent_set_device_limit */
} pyd4j_agent_stats_t;

/* --- build and errors ------------------------------------------------------------------- */
PYD4J_AGENT_API int pyd4j_agent_abi_version(void);
/* 1 for the CUDA build, 0 for the host build. */
PYD4J_AGENT_API int pyd4j_agent_is_cuda(void);
/* "cuda" or "host". */
PYD4J_AGENT_API const char* pyd4j_agent_build_kind(void);
/* Message of the last failed call on this thread ("" if none). Valid until the next call. */
PYD4J_AGENT_API const char* pyd4j_agent_last_error(void);
PYD4J_AGENT_API size_t pyd4j_agent_alignment(void);

/* --- lifecycle ---------------------------------------------------------------------------- */
/* Allocates the device arena (device_bytes) and pinned host pool (host_bytes) once, creates
 * the three streams. device_ordinal selects the GPU (ignored by the host build). */
PYD4J_AGENT_API int pyd4j_agent_create(uint64_t device_bytes, uint64_t host_bytes,
                                       int device_ordinal, pyd4j_agent** out);
/* Waits for every copy, then releases everything. NULL is accepted. */
PYD4J_AGENT_API int pyd4j_agent_destroy(pyd4j_agent* agent);

/* --- buffers ------------------------------------------------------------------------------ */
/* Allocates `size` bytes in the device arena; the compute stream is ordered after any copy
 * still using that memory. size 0 is an error. */
PYD4J_AGENT_API int pyd4j_agent_alloc(pyd4j_agent* agent, uint64_t size, uint64_t* out_id);
/* Registers memory the agent does not own (ND4J workspace, CuPy array): device memory in the
 * CUDA build, host memory in the host build. Not counted in the arena statistics. */
PYD4J_AGENT_API int pyd4j_agent_register_external(pyd4j_agent* agent, void* ptr, uint64_t size,
                                                  uint64_t* out_id);
/* Starts a device->host copy into a host slot (allocated on first offload, kept until free)
 * on the offload stream, ordered after everything issued so far on the compute stream.
 * release=1 gives the device block back to the arena at once (stream-ordered) and moves the
 * buffer to HOST. Offloading a HOST buffer is PYD4J_AGENT_ERR_BAD_STATE. */
PYD4J_AGENT_API int pyd4j_agent_offload(pyd4j_agent* agent, uint64_t id, int release);
/* Gives the device block back to the arena (stream-ordered: pending copies keep it until they
 * finish) and moves the buffer to HOST. The host slot must hold the contents (an offload was
 * issued), otherwise PYD4J_AGENT_ERR_BAD_STATE: use pyd4j_agent_free to drop data for good. */
PYD4J_AGENT_API int pyd4j_agent_release_device(pyd4j_agent* agent, uint64_t id);
/* Allocates the device block of a HOST buffer without copying (state RESERVED); the prefetch
 * stream is ordered after the copies still using that memory. */
PYD4J_AGENT_API int pyd4j_agent_reserve_device(pyd4j_agent* agent, uint64_t id);
/* Releases the host slot (stream-ordered). A RESIDENT buffer keeps its device copy; a HOST
 * buffer has nothing left and is freed (its id becomes invalid); a RESERVED buffer is
 * PYD4J_AGENT_ERR_BAD_STATE (prefetch it first, or free it). */
PYD4J_AGENT_API int pyd4j_agent_drop_host(pyd4j_agent* agent, uint64_t id);
/* Allocates a device block for a HOST buffer (or uses the RESERVED one; external buffers reuse their address) and starts (external buffers reuse their address) and starts
 * the host->device copy on the prefetch stream. The buffer is RESIDENT at once; call
 * pyd4j_agent_acquire (no host block) or pyd4j_agent_wait (host block) before the compute
 * stream reads it. */
PYD4J_AGENT_API int pyd4j_agent_prefetch(pyd4j_agent* agent, uint64_t id);
/* Points an external buffer that holds no device contents (HOST or RESERVED) at other memory
 * of the same size; the next prefetch copies the host slot there. For an owner that gave the
 * offloaded memory back (ND4J closed the array) and allocates a fresh array for the way back.
 * Copies already issued keep the addresses they were issued with. An arena buffer or a NULL
 * ptr is PYD4J_AGENT_ERR_INVALID_ARGUMENT, a RESIDENT buffer PYD4J_AGENT_ERR_BAD_STATE
 * (offload it with release=1, or release_device after its offload, first). Since ABI 3. */
PYD4J_AGENT_API int pyd4j_agent_rebind_external(pyd4j_agent* agent, uint64_t id, void* ptr);
/* Orders the compute stream after the buffer's pending copy (cudaStreamWaitEvent); the host
 * build blocks the calling thread instead, because that thread is the compute stream. */
PYD4J_AGENT_API int pyd4j_agent_acquire(pyd4j_agent* agent, uint64_t id);
/* Blocks the calling thread until the buffer's pending copy has finished. */
PYD4J_AGENT_API int pyd4j_agent_wait(pyd4j_agent* agent, uint64_t id);
/* Blocks until every copy issued so far has finished (both copy streams). */
PYD4J_AGENT_API int pyd4j_agent_synchronize(pyd4j_agent* agent);
/* Releases the buffer's device block (stream-ordered) and host slot; the id becomes invalid. */
PYD4J_AGENT_API int pyd4j_agent_free(pyd4j_agent* agent, uint64_t id);
PYD4J_AGENT_API int pyd4j_agent_buffer_info(pyd4j_agent* agent, uint64_t id,
                                            pyd4j_agent_buffer_info_t* out);

/* --- streams and statistics --------------------------------------------------------------- */
/* cudaStream_t of the given stream (NULL in the host build), for CuPy's ExternalStream. */
PYD4J_AGENT_API int pyd4j_agent_stream_handle(pyd4j_agent* agent, int stream, void** out);
/* Marks the start (begin=1) or end (begin=0) of a compute interval on the compute stream;
 * compute_seconds and overlap_seconds are computed from these marks. */
PYD4J_AGENT_API int pyd4j_agent_mark_compute(pyd4j_agent* agent, int begin);
/* Fills *out; waits for the copies issued so far so that their timings are known. */
PYD4J_AGENT_API int pyd4j_agent_get_stats(pyd4j_agent* agent, pyd4j_agent_stats_t* out);
/* Caps the bytes in use in the device arena (aligned sizes) below its capacity: an allocation
 * that would exceed the limit fails with PYD4J_AGENT_ERR_OUT_OF_DEVICE_MEMORY even if a block
 * is free. Used to run a plan under a budget in an arena with room for fragmentation.
 * 0 resets the limit to the capacity. */
PYD4J_AGENT_API int pyd4j_agent_set_device_limit(pyd4j_agent* agent, uint64_t bytes);
/* Sets device_peak/host_peak to the current in-use bytes. */
PYD4J_AGENT_API int pyd4j_agent_reset_peak(pyd4j_agent* agent);
/* Zeroes the byte counters, copy/compute timings and peaks (peaks become the in-use bytes). */
PYD4J_AGENT_API int pyd4j_agent_reset_stats(pyd4j_agent* agent);

/* --- baseline for benchmarks -------------------------------------------------------------- */
/* The plain transfer the agent is compared with: `reps` copies of `bytes` between a scratch
 * device buffer and a scratch pinned buffer (each allocated once for this call), all issued
 * with cudaMemcpyAsync on one stream and followed by one stream synchronize. Wall seconds in
 * *out_seconds. The host build uses memcpy on the calling thread. */
PYD4J_AGENT_API int pyd4j_agent_bench_plain_copy(pyd4j_agent* agent, uint64_t bytes, int direction,
                                                 int reps, double* out_seconds);

#ifdef __cplusplus
}
#endif

#endif /* PYD4J_AGENT_H */
