#pragma once
// What the rows of a masked task see (PlanView::masks: several query tokens a
// request under a causal, draft or custom mask), in the fragment layout of
// tile/softmax.cuh. The kernels' kMasked instances apply it to the raw scores
// after Q·Kᵀ, beside mask_tail; plans without masked tasks run the other
// instances, whose code NoMask leaves as it was.
#include <climits>
#include <cstdint>

#include "codec/core/state.hpp"
#include "codec/plan/plan.hpp"

namespace codec::cuda {

// The score mask of a plan without masked tasks: every row sees every key.
struct NoMask {
  template <int N>
  __device__ __forceinline__ void operator()(float (&)[N], int) const {}
};

// A lane's two rows (h = 0, 1; tile/softmax.cuh) of one task: the task tokens
// [lo, hi) each sees before its bits (PlanView::visible) and, from task token
// `bits` on, only those whose bit is set. A warp none of whose rows is
// masked in this task skips the scores altogether.
class RowMasks {
 public:
  // row[h]: the lane's rows of the task, from row_begin; rows past the
  // task's (zero queries, never written) see every key.
  __device__ __forceinline__ RowMasks(const PlanView& plan, const Task& task, const int (&row)[2]) {
    const int rows = task.row_end - task.row_begin, kv_len = task.kv_end - task.kv_begin;
    bool masked = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lo_[h] = 0;
      hi_[h] = kv_len;
      bits_[h] = INT_MAX;
      words_[h] = plan.mask_words;
      if (row[h] < rows) {
        const int q = plan.node_reqs[task.req_begin + (task.row_begin + row[h]) / plan.group];
        const PlanView::Visible seen = plan.visible(task.node, q, task.kv_begin, task.kv_end);
        lo_[h] = seen.begin - task.kv_begin;
        hi_[h] = seen.end - task.kv_begin;
        if (plan.query_bits_word[q] >= 0) {
          bits_[h] = plan.query_bits_pos[q] - plan.node_kv_begin[task.node] - task.kv_begin;
          words_[h] = plan.mask_words + plan.query_bits_word[q];
        }
        masked = masked || lo_[h] > 0 || hi_[h] < kv_len || bits_[h] < hi_[h];
      }
    }
    active_ = __any_sync(0xffffffffu, masked);
  }

  // Scores of keys a row does not see become −inf; `first` is the task token
  // of the scores' column 0 (a column's token as in mask_tail).
  template <int N>
  __device__ __forceinline__ void operator()(float (&s)[N], int first) const {
    if (!active_) return;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int h = (i / 2) % 2, token = first + 8 * (i / 4) + 2 * (lane % 4) + (i & 1);
      const int k = token - bits_[h];  // no overflow: token ≥ 0
      const bool seen = token >= lo_[h] && token < hi_[h] && (k < 0 || (__ldg(words_[h] + (k >> 5)) >> (k & 31) & 1u));
      if (!seen) s[i] = kNegInf;
    }
  }

 private:
  int lo_[2], hi_[2], bits_[2];
  const std::uint32_t* words_[2];
  bool active_;
};

// The score mask of a task's lane rows: RowMasks in a kMasked instance, else none.
template <bool kMasked>
__device__ __forceinline__ auto task_mask(const PlanView& plan, const Task& task, const int (&row)[2]) {
  if constexpr (kMasked) {
    return RowMasks(plan, task, row);
  } else {
    (void)plan, (void)task, (void)row;
    return NoMask{};
  }
}

}  // namespace codec::cuda
