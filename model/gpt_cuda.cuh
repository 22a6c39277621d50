// gpt_cuda.cuh — the CUDA GPT-2 model (model/gpt_cuda.cu); the trainer reaches it through
// make_cuda_model() in model/model.h. This header adds what the GPU tests need beyond the
// Model interface.
#pragma once
#include <vector>

#include "model/model.h"

// fp32 parameter gradients in llm.c order (ParamLayout). `m` must come from make_cuda_model;
// throws flashgpt::Error otherwise.
void cuda_model_get_grads(const Model& m, std::vector<float>& out);
