// hopper.cu — host side of hopper.cuh: tensor-map creation for TMA loads.
//
// cuTensorMapEncodeTiled is a driver-API function. We fetch it once through the runtime
// (cudaGetDriverEntryPointByVersion), so the binaries keep linking only -lcudart.
// Test: ./build/test_gpu --gtest_filter='Hopper*'   (tests/gpu/test_flash3.cu)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "kernels/attention/hopper.cuh"
#include "kernels/cuda_common.cuh"

namespace hopper {

namespace {
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                cudaEnableDefault, &q));
    CHECK(q == cudaDriverEntryPointSuccess && p,
          "the CUDA driver has no cuTensorMapEncodeTiled (flash3 needs a CUDA 12+ driver and an "
          "sm_90 GPU); use --attn flash");
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }
  return fn;
}
}  // namespace

CUtensorMap make_tensor_map_bf16_4d(const void* base, const uint64_t dims[4],
                                    const uint64_t strides_bytes[3], const uint32_t box[4]) {
  CHECK(box[0] * 2 <= 128, "internal: tensor map box rows of %u bf16 exceed the 128-byte swizzle",
        box[0]);
  CUtensorMap map;
  const cuuint64_t gdim[4] = {dims[0], dims[1], dims[2], dims[3]};
  const cuuint64_t gstride[3] = {strides_bytes[0], strides_bytes[1], strides_bytes[2]};
  const cuuint32_t gbox[4] = {box[0], box[1], box[2], box[3]};
  const cuuint32_t estride[4] = {1, 1, 1, 1};
  const CUresult r = encode_tiled_fn()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), gdim, gstride, gbox,
      estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  CHECK(r == CUDA_SUCCESS,
        "cuTensorMapEncodeTiled failed (error %d) for dims %llu x %llu x %llu x %llu, box %u x %u "
        "x %u x %u (buffers must be 16-byte aligned)",
        (int)r, (unsigned long long)dims[0], (unsigned long long)dims[1],
        (unsigned long long)dims[2], (unsigned long long)dims[3], box[0], box[1], box[2], box[3]);
  return map;
}

}  // namespace hopper
