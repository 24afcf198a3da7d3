// The merge at every head_dim, fp16 and bf16 output (kernels/launch.cuh).
#include "engine/cuda/kernels/merge.cuh"

namespace codec::cuda {

template struct MergeKernels<64, __half>;
template struct MergeKernels<64, __nv_bfloat16>;
template struct MergeKernels<128, __half>;
template struct MergeKernels<128, __nv_bfloat16>;
template struct MergeKernels<256, __half>;
template struct MergeKernels<256, __nv_bfloat16>;

}  // namespace codec::cuda
