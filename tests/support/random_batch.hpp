#pragma once
// Test support: seeded random batches built straight from page tables (no
// workload layer, no forest manager), so forest, planner and engines can be
// checked independently of them.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codec/core/dtype.hpp"
#include "codec/core/heads.hpp"
#include "codec/forest/page_table.hpp"

namespace codec::test {

struct RandomBatchSpec {
  std::uint64_t seed = 1;
  int page_size = 16;
  int num_nodes = 6;       // shared tree nodes (whole pages each)
  int num_requests = 5;
  int max_node_pages = 4;  // a node has 0..max_node_pages pages
  int max_tail = 40;       // private tokens after the shared path (0..max_tail)
  double root_prob = 0.2;  // chance that a node starts a new tree (forest)
  double fork_prob = 0.2;  // chance that a request repeats another exactly (partial last page shared)
  HeadConfig heads{8, 2, 64};
  DType dtype = DType::bf16;
  // K of page p is scaled by 1 + key_ramp · (p % 16). A node's pages have
  // consecutive ids, so its scores climb page after page: a row's running max
  // keeps rising by several units well past a task's first KV tile, which is
  // what exercises an engine's rescaling of o (random keys alone rarely move
  // the max after the first tiles).
  float key_ramp = 0.f;

  std::string describe() const {
    std::ostringstream os;
    os << "seed " << seed << " page_size " << page_size << " nodes " << num_nodes << " requests " << num_requests
       << " heads " << heads.num_qo_heads << "/" << heads.num_kv_heads << "/" << heads.head_dim << " dtype "
       << to_string(dtype);
    if (key_ramp != 0.f) os << " key_ramp " << key_ramp;
    return os.str();
  }
};

// The random batch both engines' tests draw: a forest of `nodes` shared nodes
// of up to max_node_pages pages, and private tails of up to 3 pages + 5 tokens
// (every position relative to a page boundary).
inline RandomBatchSpec engine_spec(std::uint64_t seed, const HeadConfig& heads, DType dtype, int page_size, int nodes,
                                   int requests, double fork_prob, int max_node_pages) {
  RandomBatchSpec spec;
  spec.seed = seed;
  spec.heads = heads;
  spec.dtype = dtype;
  spec.page_size = page_size;
  spec.num_nodes = nodes;
  spec.num_requests = requests;
  spec.fork_prob = fork_prob;
  spec.max_node_pages = max_node_pages;
  spec.max_tail = 3 * page_size + 5;
  return spec;
}

// Owns K/V pools (NHD), queries and CSR page tables.
struct RandomBatch {
  RandomBatchSpec spec;
  std::int64_t num_pages = 0;
  std::vector<std::byte> k, v, q;
  std::vector<std::int32_t> indptr, indices, last_page_len;

  PageTable table() const { return {indptr, indices, last_page_len, spec.page_size, num_pages}; }
  PagedKV kv() const {
    return PagedKV::nhd(k.data(), v.data(), spec.dtype, num_pages, spec.page_size, spec.heads.num_kv_heads,
                        spec.heads.head_dim);
  }
};

inline RandomBatch make_random_batch(const RandomBatchSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  RandomBatch b;
  b.spec = spec;
  std::int32_t next_page = 0;
  // Shared nodes: whole pages, so requests can continue after them.
  std::vector<int> parent(spec.num_nodes);
  std::vector<std::vector<std::int32_t>> node_pages(spec.num_nodes);
  for (int i = 0; i < spec.num_nodes; ++i) {
    parent[i] = (i == 0 || chance(spec.root_prob)) ? -1 : uniform(0, i - 1);
    const int n = uniform(0, spec.max_node_pages);
    for (int p = 0; p < n; ++p) node_pages[i].push_back(next_page++);
  }
  std::vector<std::vector<std::int32_t>> req_pages;
  std::vector<std::int32_t> req_last;
  for (int r = 0; r < spec.num_requests; ++r) {
    if (r > 0 && chance(spec.fork_prob)) {  // an exact copy: shares the partial last page too
      const int src = uniform(0, r - 1);
      req_pages.push_back(req_pages[src]);
      req_last.push_back(req_last[src]);
      continue;
    }
    std::vector<int> path;
    for (int i = uniform(0, spec.num_nodes - 1); i >= 0; i = parent[i]) path.push_back(i);
    std::vector<std::int32_t> pages;
    for (auto it = path.rbegin(); it != path.rend(); ++it) pages.insert(pages.end(), node_pages[*it].begin(), node_pages[*it].end());
    int tail = uniform(0, spec.max_tail);
    if (pages.empty()) tail = std::max(tail, 1);
    std::int32_t last = spec.page_size;
    for (int t = 0; t < tail; t += spec.page_size) {
      pages.push_back(next_page++);
      last = std::min(spec.page_size, tail - t);
    }
    req_pages.push_back(pages);
    req_last.push_back(last);
  }
  // Requests in random order: derivation must not depend on it.
  std::vector<int> order(spec.num_requests);
  for (int r = 0; r < spec.num_requests; ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), rng);
  b.indptr.push_back(0);
  for (int r : order) {
    b.indices.insert(b.indices.end(), req_pages[r].begin(), req_pages[r].end());
    b.indptr.push_back(std::int32_t(b.indices.size()));
    b.last_page_len.push_back(req_last[r]);
  }
  // Unused pages stay in the pool too (a page table never has to use all of it).
  b.num_pages = next_page + 3;
  const HeadConfig& h = spec.heads;
  const std::size_t kv_elems = std::size_t(b.num_pages) * spec.page_size * h.num_kv_heads * h.head_dim;
  const std::size_t q_elems = std::size_t(spec.num_requests) * h.num_qo_heads * h.head_dim;
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  dispatch_dtype(spec.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto fill = [&](std::vector<std::byte>& buf, std::size_t n, float scale) {
      buf.resize(n * sizeof(T));
      T* p = reinterpret_cast<T*>(buf.data());
      for (std::size_t i = 0; i < n; ++i) p[i] = from_float<T>(value(rng) * scale);
    };
    fill(b.k, kv_elems, 1.f);
    fill(b.v, kv_elems, 1.f);
    fill(b.q, q_elems, 3.f);  // sharper softmax than uniform
    const PagedKV layout = b.kv();
    if (spec.key_ramp != 0.f) {
      T* k = reinterpret_cast<T*>(b.k.data());
      for (std::int64_t page = 0; page < b.num_pages; ++page) {
        const float scale = 1.f + spec.key_ramp * float(page % 16);
        for (int slot = 0; slot < spec.page_size; ++slot)
          for (int head = 0; head < h.num_kv_heads; ++head)
            for (int d = 0; d < h.head_dim; ++d) {
              T& x = k[layout.offset(page, slot, head) + d];
              x = from_float<T>(to_float(x) * scale);
            }
      }
    }
    // Slots no request uses (past a last page's tokens, and the spare pages)
    // hold NaN, as a serving engine's pool may: an engine that lets any of
    // them into a result (even times a zero weight) fails every comparison.
    std::vector<int> used(b.num_pages, 0);
    for (int r = 0; r < spec.num_requests; ++r)
      for (std::size_t i = 0; i < req_pages[r].size(); ++i) {
        int& u = used[req_pages[r][i]];
        u = std::max(u, i + 1 == req_pages[r].size() ? req_last[r] : spec.page_size);
      }
    const T nan = from_float<T>(std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t page = 0; page < b.num_pages; ++page)
      for (int slot = used[page]; slot < spec.page_size; ++slot)
        for (int head = 0; head < h.num_kv_heads; ++head)
          for (int d = 0; d < h.head_dim; ++d) {
            const std::int64_t at = layout.offset(page, slot, head) + d;
            reinterpret_cast<T*>(b.k.data())[at] = nan;
            reinterpret_cast<T*>(b.v.data())[at] = nan;
          }
  });
  return b;
}

}  // namespace codec::test
