// The serving section of `tokentrace report`: a serving engine's steps (the tokens of a vLLM
// worker's trace) and its requests, from the step_requests table (written by the Python
// layer's engine adapter, python/tokentrace/_record/vllm_steps.py) and each step's times.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

struct sqlite3;

namespace tokentrace::cli {

// One request in one step: how many of its tokens the step computed as prefill and as decode,
// from which position.
struct StepRequestRow {
  uint32_t token = 0;
  std::string request;
  int64_t prefill = 0, decode = 0, position = 0;
};

// A step's times: its CPU span in the worker and its GPU busy time.
struct StepTime {
  int64_t begin_ns = 0, end_ns = -1;  // end -1: the step never closed
  int64_t gpu_busy_ns = 0;
};

// The rows of step_requests in step order; false with `error` set when the file cannot be read.
// A file without the table (not an engine's) gives no rows.
bool ReadStepRequests(sqlite3* db, std::vector<StepRequestRow>* out, std::string* error);

// The section's text ("" without rows): steps by kind (prefill-only, decode-only, mixed),
// tokens and requests per step, and per request its steps, prefill and decode tokens, time to
// its first token and per output token in the worker (from its first step's start), and its
// share of the steps' GPU time (each step's shared among its requests by token count).
// `gpu`: whether kernels were recorded (else no GPU column).
std::string ServingSection(const std::vector<StepRequestRow>& rows,
                           const std::map<uint32_t, StepTime>& steps, bool gpu);

}  // namespace tokentrace::cli
