/* The shape hash of op data flow (an op_links input's third field): FNV-1a over a tensor's
 * number of dims and its sizes, folded to 32 bits, never 0 (0 says "not known"). One
 * definition for the two writers: the op observer (cuda/torch/op_observer.cc, from at::Tensor
 * sizes) and the Python extension (python/src/native.cc, from a torch.Size), which must agree
 * for two ops that read tensors of one shape to have one key (TorchLens's equivalence class;
 * python/tokentrace/_read/op_loops.py). */
#ifndef TOKENTRACE_SHAPE_HASH_H_
#define TOKENTRACE_SHAPE_HASH_H_

#include <stdint.h>

static inline uint64_t tokentrace_shape_hash_step(uint64_t h, uint64_t v) {
  return (h ^ v) * 0x100000001b3ull;
}
/* Begin with the number of dims, step once per size, end. */
static inline uint64_t tokentrace_shape_hash_begin(uint64_t ndim) {
  return tokentrace_shape_hash_step(0xcbf29ce484222325ull, ndim);
}
static inline uint32_t tokentrace_shape_hash_end(uint64_t h) {
  const uint32_t folded = (uint32_t)(h ^ (h >> 32));
  return folded != 0 ? folded : 2u;
}

#endif /* TOKENTRACE_SHAPE_HASH_H_ */
