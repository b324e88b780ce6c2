// The one CUPTI callback (registered with cuptiSubscribe): turns API and
// resource callbacks into recorder:: calls, using the table in
// callback_classify.h.
//
// userdata is the CuptiApi (for the graph/node id look-ups); tests pass a
// fabricated one. Runs on the job's launching threads: no locks, no allocation,
// no exceptions.
#pragma once

#include <cupti.h>

namespace tokentrace::cupti {

void CUPTIAPI DispatchCallback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                               const void* cbdata);

}  // namespace tokentrace::cupti
