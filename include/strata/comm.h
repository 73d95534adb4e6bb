/*
 * strata communicator ABI extension, version 1 (optional for plugins).
 *
 * Collectives between the devices of several processes (ranks), for tensor and pipeline
 * parallelism: all-reduce (sum) in place, all-gather, and point-to-point send / recv. A
 * backend that offers them returns a `strata_comm_v1` table from its
 * get_proc_address(STRATA_COMM_PROC_NAME); a plugin without it returns NULL and the core
 * then refuses parallel runs on it with a clear message. The table is an extension of
 * include/strata/device.h, so the same rules hold: plain C, struct_size first, fields only
 * appended, errors as strata_status with the backend's last_error() message (for the
 * calling thread), never an abort of the process.
 *
 * Ordering: a collective is one more op on the device's queue; it runs after the ops
 * enqueued before it on `dev` and before those enqueued after it (the CPU backend runs it
 * when called; the CUDA backend enqueues NCCL on the device's stream). Every rank of a
 * communicator must issue the same collectives in the same order with the same shapes.
 *
 * Bootstrap: rank 0 calls get_unique_id(); the caller hands those bytes to every other
 * rank by its own means (the core: its control channel, or MPI) and every rank calls
 * comm_create() with them. The unique id is an opaque blob of unique_id_bytes bytes.
 *
 * Failure: a peer that died or stopped taking part must not hang the others. Each
 * communicator has a timeout (comm_create's timeout_ms; 0 = the backend's default, 60 s):
 * a collective that cannot complete within it fails (CPU: the call returns
 * STRATA_ERROR_DEVICE; CUDA: the communicator is aborted, so the stream's next
 * synchronize or readback fails) and every later call on that communicator fails at once
 * with the same message. Peers that exit are noticed before the timeout where the backend
 * can tell (CPU: the peer's process is gone).
 */
#ifndef STRATA_COMM_H_
#define STRATA_COMM_H_

#include <stdint.h>

#include "strata/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The name to pass to strata_backend_v1.get_proc_address(). */
#define STRATA_COMM_PROC_NAME "strata_comm_v1"

/* The largest unique id a backend may use (NCCL's is 128 bytes). */
#define STRATA_COMM_UNIQUE_ID_MAX_BYTES 128

typedef struct strata_comm_s* strata_comm; /* one rank's membership of a communicator */

typedef struct strata_comm_v1 {
  uint32_t struct_size;
  /* Bytes of a unique id (<= STRATA_COMM_UNIQUE_ID_MAX_BYTES). */
  int32_t unique_id_bytes;

  /* A fresh unique id into id[0 .. unique_id_bytes). Called once, by rank 0. */
  strata_status (*get_unique_id)(void* id);

  /* Joins the communicator `id` of `nranks` ranks as `rank` (0 <= rank < nranks), with the
   * device `dev` (the comm's collectives run on it). Returns once every rank has joined or
   * fails after timeout_ms (0 = 60 s). */
  strata_status (*comm_create)(strata_device dev, const void* id, int32_t nranks, int32_t rank,
                               int32_t timeout_ms, strata_comm* out);
  /* Leaves and frees the communicator (after the device's queued work on it). */
  void (*comm_free)(strata_comm comm);

  /* x (F32, F16 or BF16, packed) becomes the elementwise sum over the ranks, in place. Every
   * rank receives the same bits (the CPU backend adds in rank order). */
  strata_status (*all_reduce_sum)(strata_device dev, strata_comm comm, const strata_tensor* x);

  /* Concatenation along the last dim, in rank order: in [rows, cols] (or [cols]) of every
   * rank into out [rows, nranks * cols] (or [nranks * cols]); out[:, r*cols .. (r+1)*cols) =
   * rank r's in. Same dtype; in and out packed and not overlapping. */
  strata_status (*all_gather)(strata_device dev, strata_comm comm, const strata_tensor* in,
                              const strata_tensor* out);

  /* Point-to-point: send x (packed) to rank `peer`, which receives it with recv() into a
   * tensor of the same bytes. A send may wait until the peer takes the data. */
  strata_status (*send)(strata_device dev, strata_comm comm, const strata_tensor* x, int32_t peer);
  strata_status (*recv)(strata_device dev, strata_comm comm, const strata_tensor* x, int32_t peer);
} strata_comm_v1;

/* True when `t` (a strata_comm_v1 of t->struct_size bytes) has entry `field`. */
#define STRATA_COMM_HAS(t, field)                                                          \
  ((t)->struct_size >= offsetof(strata_comm_v1, field) + sizeof((t)->field) && (t)->field != NULL)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_COMM_H_ */
