// cuda_unavailable.cpp — linked instead of the CUDA model (model/gpt_cuda.cu, nccl_comm.cu) into
// the CPU-only builds: the CPU test binary, and flashgpt when nvcc is not installed.
#include "kernels/common.h"
#include "model/dist_comm.h"
#include "model/memory_plan.h"
#include "model/model.h"

bool cuda_device_available() { return false; }

std::unique_ptr<Model> make_cuda_model(const ModelOptions&) {
  THROW_ERROR("--device cuda: this flashgpt was built without CUDA (nvcc was not found); install the "
              "CUDA toolkit and rebuild with `make`, or use --device cpu");
}

std::unique_ptr<DistComm> make_nccl_comm(int, int, int, const std::function<void(unsigned char*)>&,
                                         const std::function<std::string()>&, double) {
  THROW_ERROR("multi-GPU training needs the CUDA build with NCCL; install the CUDA toolkit and NCCL and "
              "rebuild with `make`");
}

bool cuda_memory_info(size_t&, size_t&, std::string&) { return false; }

MemoryPlanInputs memory_plan_inputs(const ModelOptions& opt) { return memory_plan_inputs_host(opt); }
