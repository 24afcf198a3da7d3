// The PAC kernel at head_dim 64 over a cache of q's dtype, fp16 and bf16 q
// (kernels/launch.cuh): each configuration's 4 instances.
#include "engine/cuda/kernels/pac.cuh"

namespace codec::cuda {

template struct PacKernels<64, __half, false>;
template struct PacKernels<64, __nv_bfloat16, false>;

}  // namespace codec::cuda
