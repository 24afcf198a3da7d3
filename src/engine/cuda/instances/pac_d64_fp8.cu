// The PAC kernel at head_dim 64 over an fp8 cache (e4m3 or e5m2), fp16 and bf16 q
// (kernels/launch.cuh): each configuration's 4 instances.
#include "engine/cuda/kernels/pac.cuh"

namespace codec::cuda {

template struct PacKernels<64, __half, true>;
template struct PacKernels<64, __nv_bfloat16, true>;

}  // namespace codec::cuda
