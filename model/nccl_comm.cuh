// nccl_comm.cuh — NCCL_CHECK and the NCCL side of DistComm (model/dist_comm.h); implementation in
// model/nccl_comm.cu. Only nvcc-compiled files include this.
#pragma once
#include <nccl.h>

#include "kernels/common.h"
#include "model/dist_comm.h"

#define NCCL_CHECK(call)                                                                       \
  do {                                                                                         \
    ncclResult_t nccl_status_ = (call);                                                        \
    if (nccl_status_ != ncclSuccess)                                                           \
      THROW_ERROR("NCCL error %s (%s:%d): %s%s%s", ncclGetErrorString(nccl_status_), __FILE__, \
                  __LINE__, #call, ncclGetLastError(nullptr) ? "; " : "",                      \
                  ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "");                 \
  } while (0)

// A DistComm over a communicator made elsewhere (ncclCommInitAll: one process driving several
// GPUs, as the ring's GPU tests do), which it destroys with itself. Make it, and destroy it,
// with the communicator's GPU current.
std::unique_ptr<DistComm> adopt_nccl_comm(ncclComm_t comm, double timeout_s);

inline ncclComm_t as_nccl(const DistComm* c) { return static_cast<ncclComm_t>(c->nccl_comm()); }
