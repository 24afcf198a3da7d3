#pragma once
// The partial-state contract (docs/DESIGN.md §2) and the one home of its math,
// shared by the CPU engine and the CUDA kernels. A partial state of one query
// row over a set of keys is
//   o   = Σ_j exp(s_j − m) v_j / l     (normalised output, fp32)
//   lse = m + ln(l)                     (natural log, fp32)
// with s_j = sm_scale · q·k_j, m = max_j s_j, l = Σ_j exp(s_j − m).
// Empty partition (no keys): o = 0, lse = −inf. Merging with an empty state is
// the identity; merging two empty states gives an empty state, never NaN.
//
// Two guards make that so, each written once: an empty state weighs 0
// (weight_below), and a state with nothing in it normalises to the empty one
// (SoftmaxState::inv_l, lse).
#include <cmath>

#include "codec/core/hd.hpp"

namespace codec {

inline constexpr float kNegInf = -INFINITY;

// exp(x − m) for x ≤ m: the weight, under a running max m, of a state whose
// max (or lse) is x. An empty state (x = −inf) weighs 0, also while every
// state so far is empty (m = −inf, where x − m would be NaN).
CODEC_HD float weight_below(float x, float m) { return x == kNegInf ? 0.f : expf(x - m); }

// A softmax state in unnormalised form: m, the max of the scores (or of the
// partial lse) taken in so far, and l = Σ exp(score − m). The online softmax
// of one row keeps one; merging partial states folds them into one, with
// normalised partials entering as (m = lse, l = 1).
struct SoftmaxState {
  float m = kNegInf;  // the CUDA wgmma path lets m lag the true max by ≤ 8 ln 2 (attend_wgmma.cuh)
  float l = 0.f;

  // Raises m to cover new_max and rescales l; returns the factor the caller
  // multiplies its unnormalised o by.
  CODEC_HD float rescale(float new_max) {
    const float m_new = fmaxf(m, new_max);
    const float factor = weight_below(m, m_new);
    m = m_new;
    l *= factor;
    return factor;
  }
  // The factors of two unnormalised outputs merged as o = self·o_self + other·o_other.
  struct Factors {
    float self;
    float other;
  };
  // Folds another state into this one.
  CODEC_HD Factors merge(const SoftmaxState& o) {
    const float m_new = fmaxf(m, o.m);
    const Factors f{weight_below(m, m_new), weight_below(o.m, m_new)};
    l = l * f.self + o.l * f.other;
    m = m_new;
    return f;
  }
  // 1/l to normalise o; 0 for an empty state, so that o stays 0.
  CODEC_HD float inv_l() const { return l > 0.f ? 1.f / l : 0.f; }
  CODEC_HD float lse() const { return l > 0.f ? m + logf(l) : kNegInf; }
};

// Weights that merge two normalised partial states: o = w1·o1 + w2·o2.
struct MergeWeights {
  float w1;
  float w2;
  float lse;  // the merged state's; −inf when both inputs are empty
};

CODEC_HD MergeWeights merge_weights(float lse1, float lse2) {
  SoftmaxState merged{fmaxf(lse1, lse2), 0.f};
  const float e1 = weight_below(lse1, merged.m), e2 = weight_below(lse2, merged.m);
  merged.l = e1 + e2;  // ≥ 1 unless both are empty: the larger side weighs exp(0)
  const float inv_l = merged.inv_l();
  return {e1 * inv_l, e2 * inv_l, merged.lse()};
}

}  // namespace codec
