// A long foreign-NVTX "generation" job for the long-run readers benchmark (long_runs.sh): N
// tokens, each a `decode_step` range holding 11 plain ranges (embed, block_0 .. block_8,
// lm_head), 12 calls a token, no CUDA. Names carry no `.N.` layer index, as vLLM's or a user's
// ranges often do not. Run as
//   tokentrace run --on-full wait --token-range '^decode_step$' -- long_run_job N
#include <cstdio>
#include <cstdlib>

#include "nvtx3/nvToolsExt.h"

int main(int argc, char** argv) {
  const long tokens = argc > 1 ? std::atol(argv[1]) : 1000;
  static const char* const kInner[] = {"embed",   "block_0", "block_1", "block_2",
                                       "block_3", "block_4", "block_5", "block_6",
                                       "block_7", "block_8", "lm_head"};
  for (long t = 0; t < tokens; ++t) {
    nvtxRangePushA("decode_step");
    for (const char* name : kInner) {
      nvtxRangePushA(name);
      nvtxRangePop();
    }
    nvtxRangePop();
  }
  std::printf("long_run_job tokens=%ld\n", tokens);
  return 0;
}
