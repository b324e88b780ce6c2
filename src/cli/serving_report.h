// The serving sections of `tokentrace report`: a serving engine's steps (the tokens of a vLLM
// worker's trace) and its requests, from the step_requests table (written by the Python
// layer's engine adapter, python/tokentrace/_engines/vllm/steps.py) and each step's times; and
// the engine core's view (python/tokentrace/_engines/vllm/core.py): its steps' scheduler time
// and each request's queue, first token and finish, from request_events and its sites. Read
// through store/reader (Reader::Rows), as every reader of the CLI.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tokentrace {
class Reader;
}

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
bool ReadStepRequests(Reader& reader, std::vector<StepRequestRow>* out, std::string* error);

// ReadStepRequests, and the times of the steps they name within tokens first..last.
bool ReadSteps(Reader& reader, uint32_t first, uint32_t last, std::vector<StepRequestRow>* rows,
               std::map<uint32_t, StepTime>* times, std::string* error);

// An engine core's request (request_events); -1 where the file has NULL (not happened).
struct RequestEventRow {
  std::string request;
  int64_t arrival_unix_ns = -1, queued_ns = -1, scheduled_ns = -1, first_token_ns = -1,
          finished_ns = -1;
  int64_t first_step = -1, first_token_step = -1, finished_step = -1;
  std::string finish_reason;
  int64_t prompt_tokens = -1, output_tokens = -1;
  std::string role = "engine_core";  // or front_end
};

// The engine core's steps: each one's ms, and the ms of its scheduling and of its update; and
// the front end's steps (its output processing).
struct CoreSteps {
  std::vector<double> step_ms, schedule_ms, update_ms;
  std::vector<double> front_ms;
  int64_t empty = 0;  // steps whose scheduling scheduled nothing (meta engine_core_empty_steps)
};

// A worker's view of one request, for the engine core's table when both files are read.
struct WorkerRequest {
  size_t steps = 0;
  double gpu_ms = 0;
};

// The rows of request_events in queue order, each role's (none in a file without the table).
bool ReadRequestEvents(Reader& reader, std::vector<RequestEventRow>* out, std::string* error);
// The calls of vllm.core_step, vllm.schedule, vllm.update and vllm.front_step (none in other
// files).
bool ReadCoreSteps(Reader& reader, CoreSteps* out, std::string* error);
// ReadRequestEvents and ReadCoreSteps of one file, with its count of empty steps (meta
// engine_core_empty_steps).
bool ReadLives(Reader& reader, std::vector<RequestEventRow>* events, CoreSteps* steps,
               std::string* error);
// Per request of a worker's step_requests: its steps and its share of their GPU time.
std::map<std::string, WorkerRequest> WorkerRequests(const std::vector<StepRequestRow>& rows,
                                                    const std::map<uint32_t, StepTime>& steps);

// The front end's section ("" without its steps or rows): its steps' output processing ms,
// and per request (its front_end rows) first token ms (from the hand-over to the engine), per
// output token ms, tokens and finish.
std::string FrontEndSection(const std::vector<RequestEventRow>& events, const CoreSteps& steps);

// The engine core's section ("" without steps or requests; its engine_core rows): steps and their
// scheduling and update ms, and per request its queue ms, first token ms (from queued), per output
// token ms, tokens and finish reason; with `worker` (the worker's file read too) its steps there,
// and its GPU ms when `worker_gpu` (the worker recorded kernels).
std::string EngineCoreSection(const std::vector<RequestEventRow>& events, const CoreSteps& steps,
                              const std::map<std::string, WorkerRequest>* worker,
                              bool worker_gpu = false);

// The section's text ("" without rows): steps by kind (prefill-only, decode-only, mixed),
// tokens and requests per step, and per request its steps, prefill and decode tokens, time to
// its first token and per output token in the worker (from its first step's start), and its
// share of the steps' GPU time (each step's shared among its requests by token count).
// `gpu`: whether kernels were recorded (else no GPU column).
std::string ServingSection(const std::vector<StepRequestRow>& rows,
                           const std::map<uint32_t, StepTime>& steps, bool gpu);

// One rule's edits of one served request: the worker's request_events rows (`edits`, JSON
// {rule index: [steps, rows]}, written by python/tokentrace/_edit/requests.py).
struct RequestEdit {
  int64_t rule = 0;
  std::string request;
  int64_t steps = 0, rows = 0;
};

// The rules served per request (meta patch_fires' "served"), each rule's edits of requests in
// rule then request order, and the requests the worker listed. A file without them gives none.
struct ServedEdits {
  std::vector<int64_t> rules;
  std::vector<RequestEdit> edits;
  int64_t requests = 0;
  std::string unread;  // why they could not be read ("" when they were, or there are none)
};
bool ReadServedEdits(Reader& reader, ServedEdits* out, std::string* error);

// The section's text ("" without served rules): per rule, the requests it edited (steps and
// rows each), or that it edited none.
std::string EditsSection(const ServedEdits& served);

}  // namespace tokentrace::cli
