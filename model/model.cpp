// model.cpp — make_model: the device choice between the two implementations of model.h.
#include "model/model.h"

std::unique_ptr<Model> make_model(const std::string& device, const ModelOptions& opt) {
  const bool cuda = device == "cuda" || (device == "auto" && cuda_device_available());
  return cuda ? make_cuda_model(opt) : make_cpu_model(opt);
}
