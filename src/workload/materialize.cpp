// A workload made real: requests inserted into a ForestManager, whose effects
// (copy-on-write page copies, then fresh token writes) fill the K/V pools. KV
// is a function of the token id only, so reading any request's pages back and
// comparing with synthetic_kv cross-checks the manager's sharing and copies.
#include <algorithm>
#include <cmath>
#include <limits>

#include "codec/core/error.hpp"
#include "workload/workload.hpp"

namespace codec {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// [−1, 1) from the top 24 bits, exact in float.
float unit(std::uint64_t h) { return float(std::int64_t(h >> 40) - (std::int64_t(1) << 23)) * 0x1p-23f; }

// One key per (token, head, K|V); element d is unit(splitmix64(key + d)), so a
// fill costs one mix per element.
std::uint64_t kv_key(std::uint64_t seed, std::int32_t token, int kv_head, bool is_v) {
  const std::uint64_t k = splitmix64(splitmix64(seed) ^ std::uint32_t(token));
  return splitmix64(k ^ (std::uint64_t(std::uint32_t(kv_head)) << 1 | std::uint64_t(is_v)));
}

// q ∈ [−3, 3) and k ∈ [−1, 1) give logits q·k/√D with standard deviation
// 3 · √(D/9) / √D = 1 for any D (q, k ∈ [−1, 1) would give 1/3): softmax
// weights then spread over e^±3, far from uniform, without overflow risk.
constexpr float kQueryRange = 3.f;

std::uint64_t q_key(std::uint64_t seed, int request, int qo_head) {
  const std::uint64_t k = splitmix64(splitmix64(~seed) ^ std::uint32_t(request));
  return splitmix64(k ^ std::uint32_t(qo_head));
}

// Node i's tokens get ids base[i], base[i] + 1, ...: distinct across nodes, so
// sibling branches diverge at their first token.
std::vector<std::int64_t> token_bases(const Workload& w) {
  std::vector<std::int64_t> base(w.nodes.size());
  std::int64_t next = 0;
  for (std::size_t i = 0; i < w.nodes.size(); ++i) base[i] = next, next += w.nodes[i].tokens;
  CODEC_CHECK(next <= std::numeric_limits<std::int32_t>::max(), "workload '", w.name, "' has ", next,
              " tokens over all nodes; synthetic int32 token ids allow at most ",
              std::numeric_limits<std::int32_t>::max());
  return base;
}

std::vector<std::int32_t> path_token_ids(const Workload& w, const std::vector<std::int64_t>& base, int r) {
  std::vector<std::int32_t> path;
  for (std::int32_t i = w.requests[std::size_t(r)]; i >= 0; i = w.nodes[std::size_t(i)].parent) path.push_back(i);
  std::vector<std::int32_t> ids;
  ids.reserve(std::size_t(w.request_tokens(r)));
  for (auto it = path.rbegin(); it != path.rend(); ++it)
    for (std::int64_t t = 0; t < w.nodes[std::size_t(*it)].tokens; ++t)
      ids.push_back(std::int32_t(base[std::size_t(*it)] + t));
  return ids;
}

template <typename T>
void fill_row(T* out, std::uint64_t key, int n, float range) {
  for (int d = 0; d < n; ++d) out[d] = from_float<T>(range * unit(splitmix64(key + std::uint64_t(d))));
}

// Every request inserted into a forest manager, with the effects of each insert.
// The manager's pool is the no-sharing upper bound (it costs nothing until
// used); the pages used are then renumbered densely, in tables and effects
// alike, so that a K/V pool holds unique tokens only (batch:64 at page 16:
// 15,692 pages, 1 GB of bf16 K+V, not the 32 GB bound).
struct Inserted {
  WorkloadTables tables;
  std::vector<KvEffects> effects;  // per request, in insertion order
};

Inserted insert_all(const Workload& w, const std::vector<std::int64_t>& base) {
  const int ps = w.page_size;
  const int num_requests = int(w.requests.size());
  std::int64_t bound = 0;
  for (int r = 0; r < num_requests; ++r) bound += (w.request_tokens(r) + ps - 1) / ps;
  ForestManager manager(ps, bound);
  Inserted out;
  out.effects.resize(std::size_t(num_requests));
  std::vector<ForestManager::RequestId> ids(static_cast<std::size_t>(num_requests));
  for (int r = 0; r < num_requests; ++r)
    ids[std::size_t(r)] = manager.insert(path_token_ids(w, base, r), &out.effects[std::size_t(r)]);

  WorkloadTables& t = out.tables;
  t.page_size = ps;
  t.tables = manager.page_tables();
  CODEC_CHECK(t.tables.ids == ids, "forest manager page tables are not in insertion order");
  std::vector<std::int32_t> dense(std::size_t(bound), -1);
  std::int32_t used = 0;
  for (std::int32_t& page : t.tables.indices) {
    if (dense[std::size_t(page)] < 0) dense[std::size_t(page)] = used++;
    page = dense[std::size_t(page)];
  }
  t.num_pages = used;
  for (int r = 0; r < num_requests; ++r) {
    for (PageCopy& c : out.effects[std::size_t(r)].copies) {
      CODEC_CHECK(c.src >= 0 && c.src < bound && c.dst >= 0 && c.dst < bound && dense[std::size_t(c.src)] >= 0 &&
                      dense[std::size_t(c.dst)] >= 0 && c.num_tokens >= 0 && c.num_tokens <= ps,
                  "request ", r, ": forest manager copy of ", c.num_tokens, " tokens from page ", c.src, " to page ",
                  c.dst, " names a page no request holds or a bad token count");
      c.src = dense[std::size_t(c.src)];
      c.dst = dense[std::size_t(c.dst)];
    }
  }
  return out;
}

}  // namespace

WorkloadTables workload_page_tables(const Workload& workload) {
  workload.validate();
  return insert_all(workload, token_bases(workload)).tables;
}

std::vector<std::int32_t> request_token_ids(const Workload& workload, int r) {
  workload.validate();
  CODEC_CHECK(r >= 0 && std::size_t(r) < workload.requests.size(), "request index ", r, " is outside [0, ",
              workload.requests.size(), ")");
  return path_token_ids(workload, token_bases(workload), r);
}

float synthetic_kv(std::uint64_t seed, std::int32_t token, int kv_head, int dim, bool is_v) {
  return unit(splitmix64(kv_key(seed, token, kv_head, is_v) + std::uint64_t(dim)));
}

namespace {

// Each request's draft tree (WorkloadQueries), packed per request.
std::vector<std::uint8_t> draft_tree_bits(const Workload& w) {
  const int n = w.q_len, width = w.tree_width;
  const std::size_t bytes = (std::size_t(n) * std::size_t(n) + 7) / 8;
  std::vector<std::uint8_t> bits(bytes * w.requests.size(), 0);
  std::vector<int> parent(static_cast<std::size_t>(n));
  for (std::size_t r = 0; r < w.requests.size(); ++r) {
    std::uint8_t* m = bits.data() + r * bytes;
    for (int i = 0; i < n; ++i) {
      const int level = i / width;
      parent[std::size_t(i)] =
          level == 0 ? -1 : (level - 1) * width + int(splitmix64(w.seed ^ (r << 20) ^ std::uint64_t(i)) % width);
      for (int j = i; j >= 0; j = parent[std::size_t(j)]) {
        const std::size_t bit = std::size_t(i) * std::size_t(n) + std::size_t(j);
        m[bit / 8] |= std::uint8_t(1u << (bit % 8));
      }
    }
  }
  return bits;
}

}  // namespace

WorkloadQueries workload_queries(const Workload& w) {
  WorkloadQueries q;
  q.window_left = w.window_left;
  if (w.q_len == 1 && w.custom_mask.empty()) return q;
  for (std::size_t r = 0; r <= w.requests.size(); ++r) q.qo_indptr.push_back(std::int32_t(r) * w.q_len);
  if (w.tree_width > 0) q.mask_bits = draft_tree_bits(w);
  if (!w.custom_mask.empty()) q.mask_bits = w.custom_mask;
  q.mask = !w.custom_mask.empty() ? QueryMask::custom : w.tree_width > 0 ? QueryMask::draft : QueryMask::causal;
  return q;
}

PagedKV Batch::kv() const {
  PagedKV kv = PagedKV::nhd(k.data(), v.data(), dtype, num_pages, page_size, heads.num_kv_heads, heads.head_dim);
  if (!k_scale.empty()) {
    kv.k_scale = {k_scale.data(), int(k_scale.size())};
    kv.v_scale = {v_scale.data(), int(v_scale.size())};
  }
  return kv;
}

Batch materialize(const Workload& w) {
  w.validate();
  const std::vector<std::int64_t> base = token_bases(w);
  Inserted inserted = insert_all(w, base);
  const int ps = w.page_size;
  const int num_requests = int(w.requests.size());

  Batch b;
  b.heads = w.heads;
  b.dtype = w.dtype;
  b.q_dtype = is_fp8(w.dtype) ? DType::bf16 : w.dtype;
  b.page_size = ps;
  b.num_pages = inserted.tables.num_pages;
  b.tables = std::move(inserted.tables.tables);

  // Replay the effects in insertion order (a copy reads pages that earlier
  // requests wrote); within one request the token writes are independent.
  const int hkv = w.heads.num_kv_heads, hq = w.heads.num_qo_heads, dim = w.heads.head_dim;
  const std::int64_t row = std::int64_t(hkv) * dim;  // elements of one token slot
  const std::int64_t page_elems = row * ps;
  const std::size_t esize = dtype_size(w.dtype);
  b.k.resize(std::size_t(b.num_pages * page_elems) * esize);
  b.v.resize(b.k.size());
  b.queries = workload_queries(w);
  const int rows = b.num_queries();
  b.q.resize(std::size_t(rows) * std::size_t(hq) * std::size_t(dim) * dtype_size(b.q_dtype));
  // An fp8 cache stores each value over its kv head's scale ([1/16, 12), from the seed), as quantisers do.
  std::vector<float> k_range(std::size_t(hkv), 1.f), v_range(std::size_t(hkv), 1.f);
  if (is_fp8(w.dtype))
    for (int h = 0; h < hkv; ++h) {
      b.k_scale.push_back(std::ldexp(1.f + unit(splitmix64(w.seed ^ (0x5ca1eull + h))) / 2, int(h % 7) - 3));
      b.v_scale.push_back(std::ldexp(1.f + unit(splitmix64(~w.seed ^ (0x5ca1eull + h))) / 2, 3 - int(h % 7)));
      k_range[std::size_t(h)] = 1.f / b.k_scale.back(), v_range[std::size_t(h)] = 1.f / b.v_scale.back();
    }
  // Sinks in [-4, 12): from below a row's logits to well above them.
  for (int h = 0; h < hq && w.sinks; ++h) b.sinks.push_back(4.f + 8.f * unit(splitmix64(w.seed ^ (0x51d4ull + h))));
  dispatch_kv_dtype(w.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* k = reinterpret_cast<T*>(b.k.data());
    T* v = reinterpret_cast<T*>(b.v.data());
    for (int r = 0; r < num_requests; ++r) {
      const KvEffects& fx = inserted.effects[std::size_t(r)];
      for (const PageCopy& c : fx.copies) {  // NHD: a page's first num_tokens slots are contiguous
        std::copy_n(k + c.src * page_elems, c.num_tokens * row, k + c.dst * page_elems);
        std::copy_n(v + c.src * page_elems, c.num_tokens * row, v + c.dst * page_elems);
      }
      const std::vector<std::int32_t> tokens = path_token_ids(w, base, r);
      CODEC_CHECK(0 <= fx.write_begin && fx.write_begin <= fx.write_end && fx.write_end == std::int64_t(tokens.size()),
                  "request ", r, ": forest manager asks to write tokens [", fx.write_begin, ", ", fx.write_end,
                  ") of ", tokens.size());
      const std::int32_t* pages = b.tables.indices.data() + b.tables.indptr[std::size_t(r)];
#pragma omp parallel for schedule(static)
      for (std::int64_t t = fx.write_begin; t < fx.write_end; ++t) {
        const std::int64_t slot = std::int64_t(pages[t / ps]) * page_elems + (t % ps) * row;
        for (int h = 0; h < hkv; ++h) {
          fill_row(k + slot + std::int64_t(h) * dim, kv_key(w.seed, tokens[std::size_t(t)], h, false), dim,
                   k_range[std::size_t(h)]);
          fill_row(v + slot + std::int64_t(h) * dim, kv_key(w.seed, tokens[std::size_t(t)], h, true), dim,
                   v_range[std::size_t(h)]);
        }
      }
    }
  });
  dispatch_dtype(b.q_dtype, [&](auto tag) {
    using T = decltype(tag);
    T* q = reinterpret_cast<T*>(b.q.data());
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < hq; ++h)
        fill_row(q + (std::int64_t(r) * hq + h) * dim, q_key(w.seed, r, h), dim, kQueryRange);
  });
  return b;
}

}  // namespace codec
