#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "codec/core/state.hpp"

namespace codec {
namespace {

// A state (o, lse) for scores s and values v, in double.
struct Dense {
  std::vector<double> o;
  double lse;
};
Dense dense(const std::vector<double>& s, const std::vector<std::vector<double>>& v, int dim) {
  Dense d{std::vector<double>(dim, 0.0), -INFINITY};
  if (s.empty()) return d;
  double m = -INFINITY, l = 0;
  for (double x : s) m = std::max(m, x);
  for (std::size_t j = 0; j < s.size(); ++j) {
    l += std::exp(s[j] - m);
    for (int k = 0; k < dim; ++k) d.o[k] += std::exp(s[j] - m) * v[j][k];
  }
  for (double& x : d.o) x /= l;
  d.lse = m + std::log(l);
  return d;
}

TEST(MergeWeights, EmptyIsIdentity) {
  const MergeWeights a = merge_weights(2.5f, kNegInf);
  EXPECT_EQ(a.w1, 1.f);
  EXPECT_EQ(a.w2, 0.f);
  EXPECT_EQ(a.lse, 2.5f);
  const MergeWeights b = merge_weights(kNegInf, -7.f);
  EXPECT_EQ(b.w1, 0.f);
  EXPECT_EQ(b.w2, 1.f);
  EXPECT_EQ(b.lse, -7.f);
}

TEST(MergeWeights, TwoEmptyStaysEmptyWithoutNaN) {
  const MergeWeights w = merge_weights(kNegInf, kNegInf);
  EXPECT_EQ(w.w1, 0.f);
  EXPECT_EQ(w.w2, 0.f);
  EXPECT_TRUE(std::isinf(w.lse) && w.lse < 0);
}

TEST(MergeWeights, HugeGapsDoNotOverflow) {
  const MergeWeights w = merge_weights(1000.f, -1000.f);
  EXPECT_FLOAT_EQ(w.w1, 1.f);
  EXPECT_EQ(w.w2, 0.f);
  EXPECT_FLOAT_EQ(w.lse, 1000.f);
}

TEST(MergeWeights, SplitStatesMergeToTheWhole) {
  std::mt19937 rng(7);
  std::normal_distribution<double> g(0, 3);
  const int dim = 5;
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + trial % 17, cut = trial % (n + 1);  // cut may leave one side empty
    std::vector<double> s(n);
    std::vector<std::vector<double>> v(n, std::vector<double>(dim));
    for (int j = 0; j < n; ++j) {
      s[j] = g(rng);
      for (double& x : v[j]) x = g(rng);
    }
    const Dense whole = dense(s, v, dim);
    const Dense a = dense({s.begin(), s.begin() + cut}, {v.begin(), v.begin() + cut}, dim);
    const Dense b = dense({s.begin() + cut, s.end()}, {v.begin() + cut, v.end()}, dim);
    const MergeWeights w = merge_weights(float(a.lse), float(b.lse));
    EXPECT_NEAR(w.lse, whole.lse, 1e-5) << "n " << n << " cut " << cut;
    for (int k = 0; k < dim; ++k) EXPECT_NEAR(w.w1 * a.o[k] + w.w2 * b.o[k], whole.o[k], 1e-5);
  }
}

TEST(SoftmaxState, EmptyPartitionContract) {
  SoftmaxState st;
  EXPECT_EQ(st.inv_l(), 0.f);
  EXPECT_TRUE(std::isinf(st.lse()) && st.lse() < 0);
}

TEST(SoftmaxState, MatchesDenseSoftmaxAcrossTiles) {
  const std::vector<float> s = {0.5f, -1.f, 4.f, 3.5f, -20.f, 4.f, 0.f};
  SoftmaxState st;
  double o = 0;  // values v_j = j
  for (std::size_t t0 = 0; t0 < s.size(); t0 += 3) {
    float tile_max = kNegInf;
    for (std::size_t j = t0; j < std::min(s.size(), t0 + 3); ++j) tile_max = std::max(tile_max, s[j]);
    o *= st.rescale(tile_max);
    for (std::size_t j = t0; j < std::min(s.size(), t0 + 3); ++j) {
      const float p = std::exp(s[j] - st.m);
      st.l += p;
      o += p * double(j);
    }
  }
  std::vector<double> sd(s.begin(), s.end());
  std::vector<std::vector<double>> v;
  for (std::size_t j = 0; j < s.size(); ++j) v.push_back({double(j)});
  const Dense d = dense(sd, v, 1);
  EXPECT_NEAR(o * st.inv_l(), d.o[0], 1e-5);
  EXPECT_NEAR(st.lse(), d.lse, 1e-5);
}

TEST(WeightBelow, EmptyStatesWeighZeroEvenUnderAnEmptyMax) {
  EXPECT_EQ(weight_below(kNegInf, kNegInf), 0.f);
  EXPECT_EQ(weight_below(kNegInf, 3.f), 0.f);
  EXPECT_EQ(weight_below(3.f, 3.f), 1.f);
  EXPECT_FLOAT_EQ(weight_below(1.f, 3.f), std::exp(-2.f));
}

TEST(SoftmaxState, MergeOfTwoEmptyStaysEmpty) {
  SoftmaxState a, b;
  const SoftmaxState::Factors f = a.merge(b);
  EXPECT_EQ(f.self, 0.f);
  EXPECT_EQ(f.other, 0.f);
  EXPECT_EQ(a.l, 0.f);
  EXPECT_EQ(a.inv_l(), 0.f);
  EXPECT_TRUE(std::isinf(a.lse()) && a.lse() < 0);
}

// Streams of scores cut into pieces (some empty), each run as an online
// softmax, then folded left to right with merge: the whole stream's state.
TEST(SoftmaxState, MergedPiecesEqualTheWholeStream) {
  std::mt19937 rng(11);
  std::normal_distribution<double> g(0, 4);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 1 + trial % 23, pieces = 1 + trial % 5;
    std::vector<double> s(n);
    std::vector<std::vector<double>> v(n, std::vector<double>(1));
    for (int j = 0; j < n; ++j) s[j] = g(rng), v[j][0] = g(rng);
    std::vector<int> cuts = {0, n};
    for (int c = 1; c < pieces; ++c) cuts.push_back(int(rng() % (n + 1)));
    std::sort(cuts.begin(), cuts.end());
    SoftmaxState whole;
    float o = 0.f;  // unnormalised, under whole.m
    for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
      SoftmaxState piece;
      float po = 0.f;
      for (int j = cuts[c]; j < cuts[c + 1]; ++j) {
        po *= piece.rescale(float(s[j]));
        const float p = std::exp(float(s[j]) - piece.m);
        piece.l += p;
        po += p * float(v[j][0]);
      }
      const SoftmaxState::Factors f = whole.merge(piece);
      o = o * f.self + po * f.other;
    }
    const Dense d = dense(s, v, 1);
    EXPECT_NEAR(o * whole.inv_l(), d.o[0], 1e-4) << "trial " << trial;
    EXPECT_NEAR(whole.lse(), d.lse, 1e-5) << "trial " << trial;
  }
}

}  // namespace
}  // namespace codec
