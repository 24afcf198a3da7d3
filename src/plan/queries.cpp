#include "codec/plan/queries.hpp"

#include <algorithm>
#include <limits>

#include "codec/core/error.hpp"
#include "plan/query_forest.hpp"

namespace codec {

namespace {

// The mask matrix's bits for request r: custom q_len × kv_len, draft q_len × q_len.
std::int64_t mask_bits_of(const QueryBatch& q, int r, std::int64_t kv_len) {
  const std::int64_t n = q.q_len(r);
  return q.mask == QueryMask::custom ? n * kv_len : q.mask == QueryMask::draft ? n * n : 0;
}

bool bit(std::span<const std::uint8_t> bits, std::int64_t b) { return bits[std::size_t(b / 8)] >> (b % 8) & 1; }

}  // namespace

void QueryBatch::validate(std::span<const std::int64_t> kv_len) const {
  const int batch = int(kv_len.size());
  CODEC_CHECK(window_left >= -1, "window_left ", window_left, " must be >= -1 (-1: no window)");
  if (!one_token_each()) {
    CODEC_CHECK(qo_indptr.size() == std::size_t(batch) + 1, "qo_indptr has ", qo_indptr.size(),
                " entries, expected ", batch + 1, " (one per request and one more)");
    CODEC_CHECK(qo_indptr[0] == 0, "qo_indptr[0] = ", qo_indptr[0], " must be 0");
    for (int r = 0; r < batch; ++r) {
      CODEC_CHECK(qo_indptr[r + 1] > qo_indptr[r], "qo_indptr[", r + 1, "] = ", qo_indptr[r + 1],
                  " must be greater than qo_indptr[", r, "] = ", qo_indptr[r], " (every request has a query token)");
      CODEC_CHECK(q_len(r) <= kv_len[r], "request ", r, " has ", q_len(r), " query tokens but ", kv_len[r],
                  " KV tokens: its query tokens are the last of its KV");
    }
  }
  const bool bits = mask == QueryMask::custom || mask == QueryMask::draft;
  const std::int64_t want = bits ? mask_byte_offsets(kv_len, *this).back() : 0;
  CODEC_CHECK(std::int64_t(mask_bits.size()) == want, "mask has ", mask_bits.size(), " bytes, expected ", want,
              bits ? " (each request's matrix in whole bytes)" : " (no custom or draft mask)");
}

bool QueryBatch::sees(int r, int i, std::int64_t j, std::int64_t kv_len, std::int64_t mask_byte) const {
  const std::int64_t n = q_len(r), first_new = kv_len - n;
  if (window_left >= 0 && j < first_new + i - window_left) return false;
  switch (mask) {
    case QueryMask::none: return true;
    case QueryMask::causal: return j <= first_new + i;
    case QueryMask::custom: return bit(mask_bits, mask_byte * 8 + i * kv_len + j);
    case QueryMask::draft: return j < first_new || bit(mask_bits, mask_byte * 8 + i * n + (j - first_new));
  }
  return true;
}

std::vector<std::int64_t> mask_byte_offsets(std::span<const std::int64_t> kv_len, const QueryBatch& queries) {
  std::vector<std::int64_t> offsets(kv_len.size() + 1, 0);
  for (std::size_t r = 0; r < kv_len.size(); ++r)
    offsets[r + 1] = offsets[r] + (mask_bits_of(queries, int(r), kv_len[r]) + 7) / 8;
  return offsets;
}

std::vector<std::int64_t> request_lengths(const Forest& forest) {
  std::vector<std::int64_t> n(std::size_t(forest.num_requests()));
  for (int r = 0; r < forest.num_requests(); ++r) n[std::size_t(r)] = forest.request_tokens(r);
  return n;
}

namespace planning {

Forest query_forest(const Forest& forest, const QueryBatch& queries) {
  Forest f = forest;
  f.reqs.clear();
  for (ForestNode& n : f.nodes) {
    const std::int64_t begin = std::int64_t(f.reqs.size());
    for (int k = 0; k < n.num_reqs; ++k) {
      const int r = forest.reqs[n.req_begin + k];
      for (int q = queries.qo_indptr[r]; q < queries.qo_indptr[r + 1]; ++q) f.reqs.push_back(q);
    }
    n.req_begin = begin;
    n.num_reqs = std::int32_t(std::int64_t(f.reqs.size()) - begin);
  }
  f.request_node.clear();
  for (int r = 0; r < forest.num_requests(); ++r) f.request_node.insert(f.request_node.end(), queries.q_len(r),
                                                                         forest.request_node[r]);
  return f;
}

void query_masks(const Forest& forest, const QueryBatch& queries, PlanArrays& a, bool always) {
  const int batch = forest.num_requests();
  const int tokens = queries.num_queries(batch);
  const bool bits = queries.mask == QueryMask::custom || queries.mask == QueryMask::draft;
  const std::vector<std::int64_t> kv_len = request_lengths(forest);
  const std::vector<std::int64_t> bytes = mask_byte_offsets(kv_len, queries);
  std::vector<std::int32_t> lo(tokens, 0), hi(tokens), bits_pos(tokens, 0), bits_word(tokens, -1);
  std::vector<std::uint32_t> words;
  bool masked = false;
  for (int r = 0; r < batch; ++r) {
    const int n = queries.q_len(r), len = int(kv_len[r]);
    const int first = queries.one_token_each() ? r : queries.qo_indptr[r];
    for (int i = 0; i < n; ++i) {
      const int q = first + i;
      hi[q] = queries.mask == QueryMask::causal ? len - n + i + 1 : len;
      if (queries.window_left >= 0) lo[q] = std::max(0, len - n + i - queries.window_left);
      masked = masked || hi[q] < len || lo[q] > 0;
      if (!bits) continue;
      // Row i of the request's matrix: the keys from `pos` on, a bit each (QueryBatch::sees).
      const int pos = queries.mask == QueryMask::custom ? 0 : len - n;
      bits_pos[q] = pos;
      bits_word[q] = std::int32_t(words.size());
      CODEC_CHECK(words.size() + std::size_t(len - pos + 31) / 32 <= std::size_t(std::numeric_limits<std::int32_t>::max()),
                  "mask of ", words.size(), " words: more than the plan's 32-bit offsets reach");
      words.resize(words.size() + std::size_t(len - pos + 31) / 32, 0u);
      std::uint32_t* row = words.data() + bits_word[q];
      for (int k = 0; k < len - pos; ++k) {
        if (queries.sees(r, i, pos + k, len, bytes[r])) row[k / 32] |= 1u << (k % 32);
        else masked = true;
      }
    }
  }
  if (!masked && !always) return;
  // Every node's first position: its ancestors' tokens.
  a.node_kv_begin.resize(forest.nodes.size());
  for (std::size_t i = 0; i < forest.nodes.size(); ++i) {
    const ForestNode& n = forest.nodes[i];
    a.node_kv_begin[i] = n.parent < 0 ? 0 : a.node_kv_begin[n.parent] + forest.nodes[n.parent].num_tokens;
  }
  a.query_lo = std::move(lo);
  a.query_hi = std::move(hi);
  a.query_bits_pos = std::move(bits_pos);
  a.query_bits_word = std::move(bits_word);
  a.mask_words = std::move(words);
}

std::optional<Forest> trim_unseen_heads(const Forest& rows, PlanArrays& a) {
  std::optional<Forest> trimmed;
  if (a.query_lo.empty()) return trimmed;
  for (std::size_t i = 0; i < rows.nodes.size(); ++i) {
    const ForestNode& n = rows.nodes[i];
    if (n.num_reqs == 0 || n.num_tokens == 0) continue;
    std::int64_t first = n.num_tokens;  // the first token some row of the node sees
    for (std::int32_t k = 0; k < n.num_reqs; ++k)
      first = std::min<std::int64_t>(
          first, std::max<std::int64_t>(0, a.query_lo[rows.reqs[n.req_begin + k]] - a.node_kv_begin[i]));
    const std::int32_t pages = std::int32_t(first / rows.page_size);  // whole pages: a page's slots stay as they are
    if (pages == 0) continue;
    if (!trimmed) trimmed = rows;
    ForestNode& t = trimmed->nodes[i];
    t.page_begin += pages;
    t.num_pages -= pages;
    t.num_tokens -= pages * rows.page_size;
    a.node_kv_begin[i] += pages * rows.page_size;
  }
  return trimmed;
}

}  // namespace planning

}  // namespace codec
