// The CPU backend's in-process entry points. plugin_entry.cpp exports them through the
// device ABI; tests link the static library and call them without dlopen().
#ifndef STRATA_BACKENDS_CPU_CPU_BACKEND_H_
#define STRATA_BACKENDS_CPU_CPU_BACKEND_H_

#include <stdint.h>

#include "strata/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The plugin description and its function table (static storage, never freed). */
const strata_plugin_info* strata_cpu_plugin_info(void);
/* How well this CPU suits the backend: >= 10 on any x86-64, more with AVX2/AVX-512/AMX. */
int32_t strata_cpu_backend_score(void);

/*
 * KV cache layout, which is also the packed host layout of swap_blocks(): one block is
 * kv_block_bytes() bytes, ordered [layer][K then V] parts, each [block_size][num_kv_heads]
 * [head_dim] in the cache dtype; an I8 part then holds F32 scales [num_kv_heads] (4-byte
 * aligned). Inside the cache each layer holds K as [num_blocks] parts followed by V.
 */

#ifdef __cplusplus
}
#endif

#endif  // STRATA_BACKENDS_CPU_CPU_BACKEND_H_
