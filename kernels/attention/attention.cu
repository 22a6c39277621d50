// attention.cu — the GPU attention registry: name -> backend, for every entry of
// FLASHGPT_ATTENTION_BACKENDS (backends.h). Backend `foo` is make_foo_attention(), defined in
// foo.cu; nothing here changes when one is added. Tests and benchmarks loop over
// attention_names(), so a backend is tested and benched the day it is added.
#include "kernels/attention/attention.cuh"

#define FLASHGPT_DECLARE_MAKE(name) std::unique_ptr<AttentionBackend> make_##name##_attention();
FLASHGPT_ATTENTION_BACKENDS(FLASHGPT_DECLARE_MAKE)
#undef FLASHGPT_DECLARE_MAKE

std::unique_ptr<AttentionBackend> make_attention(const std::string& name) {
  attention_spec(name);  // an unknown name throws here, listing the names
#define FLASHGPT_MAKE_IF(n) \
  if (name == #n) return make_##n##_attention();
  FLASHGPT_ATTENTION_BACKENDS(FLASHGPT_MAKE_IF)
#undef FLASHGPT_MAKE_IF
  THROW_ERROR("internal: attention backend '%s' has a spec but no GPU code", name.c_str());
}
