// cuda_unavailable.cpp — linked instead of model/gpt_cuda.cu into the CPU-only builds
// (the CPU test binary, and flashgpt when nvcc is not installed).
#include "kernels/common.h"
#include "model/model.h"

bool cuda_device_available() { return false; }

std::unique_ptr<Model> make_cuda_model(const ModelOptions&) {
  FAIL("--device cuda: this flashgpt was built without CUDA (nvcc was not found); install the "
       "CUDA toolkit and rebuild with `make`, or use --device cpu");
}

std::unique_ptr<DistComm> make_nccl_comm(int, int, int, const std::function<void(unsigned char*)>&,
                                         const std::function<std::string()>&, double) {
  FAIL("multi-GPU training needs the CUDA build with NCCL; install the CUDA toolkit and NCCL and "
       "rebuild with `make`");
}
