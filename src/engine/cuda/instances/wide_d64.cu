// The wide kernel at head_dim 64, fp16 and bf16 q, over a cache of q's dtype
// or an fp8 one (kernels/launch.cuh): each configuration's 4 instances. An
// sm_80 build compiles them to a trap the engine never launches.
#include "engine/cuda/kernels/pac_wide.cuh"

namespace codec::cuda {

template struct WideKernels<64, __half, false>;
template struct WideKernels<64, __nv_bfloat16, false>;
template struct WideKernels<64, __half, true>;
template struct WideKernels<64, __nv_bfloat16, true>;

}  // namespace codec::cuda
