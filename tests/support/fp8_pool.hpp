#pragma once
// An fp8 copy of a random batch's K and V, as a quantising cache stores it:
// each value divided by its kv head's scale and rounded to e4m3 or e5m2.
// Both engines' tests run on it against the fp64 reference of the same
// dequantised values.
#include <cstdint>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/forest/page_table.hpp"
#include "support/random_batch.hpp"

namespace codec::test {

struct Fp8Pool {
  std::vector<std::uint8_t> k, v;       // NHD, as the batch's
  std::vector<float> k_scale, v_scale;  // empty: none; one value, or one a kv head
  // The pool on the host (k and v point here; the scales too).
  PagedKV kv(const RandomBatch& b, DType dtype) const {
    PagedKV p = PagedKV::nhd(k.data(), v.data(), dtype, b.num_pages, b.spec.page_size, b.spec.heads.num_kv_heads,
                             b.spec.heads.head_dim);
    p.k_scale = {k_scale.empty() ? nullptr : k_scale.data(), int(k_scale.size())};
    p.v_scale = {v_scale.empty() ? nullptr : v_scale.data(), int(v_scale.size())};
    return p;
  }
};

// `scales` values each (0: none; 1: one for every kv head; else one a kv head).
inline Fp8Pool quantise(const RandomBatch& b, DType dtype, int scales) {
  Fp8Pool pool;
  const int H = b.spec.heads.num_kv_heads, D = b.spec.heads.head_dim;
  for (int h = 0; h < scales; ++h) pool.k_scale.push_back(0.25f + 0.5f * h), pool.v_scale.push_back(1.5f - 0.125f * h);
  auto convert = [&](const std::vector<std::byte>& src, const std::vector<float>& scale, std::vector<std::uint8_t>& dst) {
    const std::vector<float> x = to_floats(src, b.spec.dtype);
    dst.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const int h = int(i / D % H);  // NHD: [page, token, head, dim]
      const float s = scale.empty() ? 1.f : scale[scale.size() == 1 ? 0 : std::size_t(h)];
      dst[i] = dtype == DType::e4m3 ? float_to_e4m3(x[i] / s) : float_to_e5m2(x[i] / s);
    }
  };
  convert(b.k, pool.k_scale, pool.k);
  convert(b.v, pool.v_scale, pool.v);
  return pool;
}

}  // namespace codec::test
