// gpt_cuda.cuh — the CUDA GPT-2 model (model/gpt_cuda.cu); the trainer reaches it through
// make_cuda_model() in model/model.h. This header adds what the GPU tests need beyond the
// Model interface.
#pragma once
#include <string>
#include <vector>

#include "model/model.h"

// fp32 parameter gradients in llm.c order (ParamLayout). `m` must come from make_cuda_model;
// throws flashgpt::Error otherwise.
void cuda_model_get_grads(const Model& m, std::vector<float>& out);

// Tests: with ModelOptions.guard_bytes > 0 every buffer of the plan is followed by a guard the
// model fills with a pattern; one line per buffer whose guard was written since ("name (N bytes
// planned): written K bytes past its end"). Waits for the device. Empty without guards.
std::vector<std::string> cuda_model_guard_violations(const Model& m);
// Tests of the guards themselves: writes `bytes` zero bytes right after buffer `name` (a line of
// FLASHGPT_MODEL_BUFFERS, model/memory_plan.h), as a kernel overrunning it would.
void cuda_model_write_past_end(Model& m, const std::string& name, size_t bytes);
// Tests: how many times the model launched a CUDA graph of its forward or backward
// (ModelOptions.cuda_graphs), so that a test of the graphs can see that they ran.
long long cuda_model_graph_launches(const Model& m);
