#pragma once
// Test support: several query tokens a request over a RandomBatch, under a
// mask (QueryBatch), with their own q rows. Query lengths range from 1 to
// max_q (or the request's KV), so a request's tokens often reach past its own
// last node into a shared one; custom masks hide random keys anywhere, shared
// nodes included, and leave some rows nothing to see; draft masks are random
// trees over each request's new tokens.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/plan/queries.hpp"
#include "support/random_batch.hpp"

namespace codec::test {

struct RandomQueries {
  std::vector<std::int32_t> qo_indptr{0};
  QueryMask mask = QueryMask::causal;
  std::vector<std::uint8_t> bits;
  std::vector<std::byte> q;  // [num_queries, Hq, D] in the batch's dtype
  QueryBatch view() const { return {qo_indptr, mask, bits}; }
  int num_queries() const { return qo_indptr.back(); }
};

inline RandomQueries make_random_queries(const RandomBatch& b, QueryMask mask, int max_q, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 17);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const PageTable table = b.table();
  RandomQueries r;
  r.mask = mask;
  std::vector<std::int64_t> kv_len;
  for (int req = 0; req < table.num_requests(); ++req) {
    kv_len.push_back(table.request_tokens(req));
    const int n = uniform(1, int(std::min<std::int64_t>(max_q, kv_len.back())));
    r.qo_indptr.push_back(r.qo_indptr.back() + n);
  }
  const QueryBatch shape{r.qo_indptr, mask, {}};
  if (mask == QueryMask::custom || mask == QueryMask::draft) {
    const std::vector<std::int64_t> offsets = mask_byte_offsets(kv_len, shape);
    r.bits.assign(std::size_t(offsets.back()), 0);
    auto set = [&](std::int64_t bit) { r.bits[std::size_t(bit / 8)] |= std::uint8_t(1u << (bit % 8)); };
    for (int req = 0; req < table.num_requests(); ++req) {
      const int n = shape.q_len(req);
      const std::int64_t base = offsets[req] * 8, len = kv_len[req];
      if (mask == QueryMask::custom) {
        const double keep = std::uniform_real_distribution<double>(0.3, 1.0)(rng);
        for (int i = 0; i < n; ++i) {
          if (uniform(0, 9) == 0) continue;  // a row that sees no key
          for (std::int64_t j = 0; j < len; ++j)
            if (std::bernoulli_distribution(keep)(rng)) set(base + i * len + j);
        }
      } else {  // a random tree: each new token's parent among the earlier ones, or none
        std::vector<int> parent(n);
        for (int i = 0; i < n; ++i) parent[i] = i == 0 ? -1 : uniform(-1, i - 1);
        for (int i = 0; i < n; ++i)
          for (int j = i; j >= 0; j = parent[j]) set(base + std::int64_t(i) * n + j);
      }
    }
  }
  const HeadConfig& h = b.spec.heads;
  const std::size_t elems = std::size_t(r.num_queries()) * h.num_qo_heads * h.head_dim;
  std::uniform_real_distribution<float> value(-3.f, 3.f);
  dispatch_dtype(b.spec.dtype, [&](auto tag) {
    using T = decltype(tag);
    r.q.resize(elems * sizeof(T));
    T* p = reinterpret_cast<T*>(r.q.data());
    for (std::size_t i = 0; i < elems; ++i) p[i] = from_float<T>(value(rng));
  });
  return r;
}

// A prefill chunk a request over its cached prefix: each request's last
// `chunk` tokens (or all it has) as causal query tokens, q of small random
// bytes in the batch's 16-bit dtype (the exponent bits stay low).
inline RandomQueries chunk_queries(const RandomBatch& b, int chunk, std::uint64_t seed) {
  RandomQueries q;
  const PageTable table = b.table();
  for (int r = 0; r < table.num_requests(); ++r)
    q.qo_indptr.push_back(q.qo_indptr.back() + int(std::min<std::int64_t>(chunk, table.request_tokens(r))));
  const HeadConfig& h = b.spec.heads;
  q.q.resize(std::size_t(q.num_queries()) * h.num_qo_heads * h.head_dim * 2);
  std::mt19937 rng{std::uint32_t(seed)};
  for (std::byte& x : q.q) x = std::byte(rng() % 64);
  return q;
}

}  // namespace codec::test
