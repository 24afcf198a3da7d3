#pragma once
// The partial-state contract (docs/DESIGN.md §2), shared by the CPU engine and the CUDA
// kernels. A partial state of one query row over a set of keys is
//   o   = Σ_j exp(s_j − m) v_j / l     (normalised output, fp32)
//   lse = m + ln(l)                     (natural log, fp32)
// with s_j = sm_scale · q·k_j, m = max_j s_j, l = Σ_j exp(s_j − m).
// Empty partition (no keys): o = 0, lse = −inf. Merging with an empty state is
// the identity; merging two empty states gives an empty state, never NaN.
#include <cmath>

#include "codec/core/hd.hpp"

namespace codec {

inline constexpr float kNegInf = -INFINITY;

// Weights that merge two normalised partial states:
//   o = w1·o1 + w2·o2, lse = log(exp(lse1) + exp(lse2)) computed through the max.
struct MergeWeights {
  float w1;   // exp(lse1 − lse)
  float w2;   // exp(lse2 − lse)
  float lse;  // merged log-sum-exp; −inf when both inputs are empty
};

CODEC_HD MergeWeights merge_weights(float lse1, float lse2) {
  const float m = fmaxf(lse1, lse2);
  if (m == kNegInf) return {0.f, 0.f, kNegInf};  // both empty: stay empty
  const float e1 = expf(lse1 - m);                // exp(−inf) = 0 for an empty side
  const float e2 = expf(lse2 - m);
  const float s = e1 + e2;  // ≥ 1: the larger side contributes exp(0)
  return {e1 / s, e2 / s, m + logf(s)};
}

// Online softmax over a stream of scores for one row (unnormalised o).
struct OnlineSoftmax {
  float m = kNegInf;  // m: the max of the scores seen so far (the CUDA wgmma path lets it lag by ≤ 8 ln 2)
  float l = 0.f;      // l: Σ exp(score − m) over the scores seen so far

  // Raises the running max to cover a new tile whose max is tile_max, scales
  // l, and returns the factor the caller multiplies its unnormalised o by.
  CODEC_HD float rescale(float tile_max) {
    const float m_new = fmaxf(m, tile_max);
    const float factor = (m == kNegInf) ? 0.f : expf(m - m_new);
    m = m_new;
    l *= factor;
    return factor;
  }
  // 1/l to normalise o; 0 for an empty partition so that o stays 0.
  CODEC_HD float inv_l() const { return l > 0.f ? 1.f / l : 0.f; }
  CODEC_HD float lse() const { return l > 0.f ? m + logf(l) : kNegInf; }
};

}  // namespace codec
