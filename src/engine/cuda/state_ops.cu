// Device versions of two small host operations the Python package exposes:
// the merge of two partial states (merge_states_cpu) and the page copies a
// forest manager asks for (copy_pages_cpu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <type_traits>

#include "codec/core/error.hpp"
#include "codec/core/state.hpp"
#include "codec/engine/cuda_check.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "engine/run_checks.hpp"

namespace codec {

namespace {

// ---------------------------------------------------------------- merge of two states

struct MergeStatesParams {
  const void* o_a;
  const void* o_b;
  void* out;
  RowStrides a_rows, b_rows, out_rows;  // in elements of the o dtype
  const float* lse_a;
  const float* lse_b;
  float* lse_out;
  RowStrides lse_a_rows, lse_b_rows, lse_out_rows;
  int batch, heads, dim;
  float to_e;    // input lse · to_e is natural log
  float from_e;  // natural log · from_e is the output's base
};

template <typename T>
__device__ __forceinline__ float load_float(const T* p) {
  if constexpr (std::is_same_v<T, float>) return *p;
  else if constexpr (std::is_same_v<T, __half>) return __half2float(*p);
  else return __bfloat162float(*p);
}
template <typename T>
__device__ __forceinline__ T from_f32(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}

// One warp per (n, h) row; every lane computes the row's weights (one pair of
// exponentials) and merges its share of the dims. out may alias an input: a
// lane reads each of its elements before writing it.
template <typename T>
__global__ void merge_states_kernel(const __grid_constant__ MergeStatesParams p) {
  const std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= std::int64_t(p.batch) * p.heads) return;
  const int n = int(row / p.heads), h = int(row % p.heads), lane = threadIdx.x % 32;
  const MergeWeights w = merge_weights(p.lse_a[p.lse_a_rows.at(n, h)] * p.to_e, p.lse_b[p.lse_b_rows.at(n, h)] * p.to_e);
  const T* a = static_cast<const T*>(p.o_a) + p.a_rows.at(n, h);
  const T* b = static_cast<const T*>(p.o_b) + p.b_rows.at(n, h);
  T* out = static_cast<T*>(p.out) + p.out_rows.at(n, h);
  for (int d = lane; d < p.dim; d += 32) out[d] = from_f32<T>(w.w1 * load_float(a + d) + w.w2 * load_float(b + d));
  if (lane == 0) p.lse_out[p.lse_out_rows.at(n, h)] = w.lse * p.from_e;
}

// ---------------------------------------------------------------- page copies

constexpr int kCopiesPerLaunch = 64;  // 768 bytes of copies in the launch parameters

struct CopyPagesParams {
  const void* k;  // the pool, written through these (PagedKV holds const pointers)
  const void* v;
  std::int64_t stride_page, stride_token, stride_head;  // in elements
  int num_kv_heads, head_dim;
  int num_copies;
  PageCopy copies[kCopiesPerLaunch];
};

// Block c copies copies[c]: its tokens × kv heads × dims of K and V, as
// elements of E (the dtype's size). No two copies of a launch touch a page
// another one writes, so blocks need no order.
template <typename E>
__global__ void copy_pages_kernel(const __grid_constant__ CopyPagesParams p) {
  const PageCopy c = p.copies[blockIdx.x];
  const std::int64_t per_token = std::int64_t(p.num_kv_heads) * p.head_dim;
  for (std::int64_t i = threadIdx.x; i < c.num_tokens * per_token; i += blockDim.x) {
    const int t = int(i / per_token), h = int(i % per_token / p.head_dim), d = int(i % p.head_dim);
    const std::int64_t src = c.src * p.stride_page + t * p.stride_token + h * p.stride_head + d;
    const std::int64_t dst = c.dst * p.stride_page + t * p.stride_token + h * p.stride_head + d;
    E* k = static_cast<E*>(const_cast<void*>(p.k));
    E* v = static_cast<E*>(const_cast<void*>(p.v));
    k[dst] = k[src];
    v[dst] = v[src];
  }
}

}  // namespace

void cuda_merge_states(const QueryRows& o_a, const LseRows& lse_a, const QueryRows& o_b, const LseRows& lse_b,
                       const OutputRows& out, const LseRows& lse_out, LseBase base, CudaStream stream) {
  check_merge_states(o_a, lse_a, o_b, lse_b, out, lse_out);
  const std::int64_t rows = std::int64_t(o_a.batch) * o_a.heads;
  if (rows == 0) return;
  const MergeStatesParams p{o_a.data,      o_b.data,          out.data,          o_a.strides(),
                            o_b.strides(), out.strides(),     lse_a.data,        lse_b.data,
                            lse_out.data,  lse_a.strides(),   lse_b.strides(),   lse_out.strides(),
                            o_a.batch,     o_a.heads,         o_a.dim,           base == LseBase::two ? 1.f / kLog2E : 1.f,
                            lse_scale(base)};
  constexpr int kThreads = 256;  // 8 rows a block
  const auto blocks = static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads);
  switch (o_a.dtype) {
    case DType::f16: merge_states_kernel<__half><<<blocks, kThreads, 0, stream>>>(p); break;
    case DType::bf16: merge_states_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(p); break;
    case DType::f32: merge_states_kernel<float><<<blocks, kThreads, 0, stream>>>(p); break;
    case DType::e4m3:
    case DType::e5m2: throw_not_a_query_dtype(o_a.dtype);
  }
  CODEC_CUDA_CHECK_LAUNCH("merge_states_kernel", stream);
}

void cuda_copy_pages(const PagedKV& kv, std::span<const PageCopy> copies, CudaStream stream) {
  check_page_copies(kv, copies);
  CopyPagesParams p{kv.k, kv.v, kv.stride_page, kv.stride_token, kv.stride_head, kv.num_kv_heads, kv.head_dim, 0, {}};
  // Copies apply in order: a launch ends before a copy that reads or writes a
  // page an earlier copy of the launch writes, or writes a page it reads.
  std::set<std::int32_t> written, read;
  auto flush = [&] {
    if (p.num_copies == 0) return;
    switch (dtype_size(kv.dtype)) {  // elements as words of their size: strides count elements
      case 4: copy_pages_kernel<std::uint32_t><<<p.num_copies, 256, 0, stream>>>(p); break;
      case 2: copy_pages_kernel<std::uint16_t><<<p.num_copies, 256, 0, stream>>>(p); break;
      default: copy_pages_kernel<std::uint8_t><<<p.num_copies, 256, 0, stream>>>(p); break;
    }
    CODEC_CUDA_CHECK_LAUNCH("copy_pages_kernel", stream);
    p.num_copies = 0;
    written.clear();
    read.clear();
  };
  for (const PageCopy& c : copies) {
    if (p.num_copies == kCopiesPerLaunch || written.count(c.src) || written.count(c.dst) || read.count(c.dst)) flush();
    p.copies[p.num_copies++] = c;
    written.insert(c.dst);
    read.insert(c.src);
  }
  flush();
}

}  // namespace codec
