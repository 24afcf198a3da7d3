#include "codec/forest/forest.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "codec/core/error.hpp"

namespace codec {

std::int64_t Forest::unique_tokens() const {
  std::int64_t total = 0;
  for (const ForestNode& n : nodes) total += n.num_tokens;
  return total;
}

std::int64_t Forest::flat_tokens() const {
  std::int64_t total = 0;
  for (const ForestNode& n : nodes) total += std::int64_t(n.num_tokens) * n.num_reqs;
  return total;
}

std::int64_t Forest::request_tokens(int r) const {
  std::int64_t total = 0;
  for (int i = request_node[r]; i >= 0; i = nodes[i].parent) total += nodes[i].num_tokens;
  return total;
}

void Forest::validate() const {
  CODEC_CHECK(page_size >= 1, "forest page_size ", page_size, " must be >= 1");
  CODEC_CHECK(!request_node.empty(), "forest has no requests");
  const int num = num_nodes();
  std::vector<std::int32_t> expected(num, 0);  // requests whose path crosses each node
  for (int r = 0; r < num_requests(); ++r) {
    CODEC_CHECK(request_node[r] >= 0 && request_node[r] < num, "request ", r, " names node ", request_node[r],
                ", outside [0, ", num, ")");
    for (int i = request_node[r]; i >= 0; i = nodes[i].parent) ++expected[i];
    CODEC_CHECK(request_tokens(r) > 0, "request ", r, " has no KV tokens on its path");
  }
  for (int i = 0; i < num; ++i) {
    const ForestNode& n = nodes[i];
    CODEC_CHECK(n.parent >= -1 && n.parent < i, "node ", i, " has parent ", n.parent,
                "; parents must come first (parent < index)");
    CODEC_CHECK(n.num_tokens >= 0, "node ", i, " has negative num_tokens ", n.num_tokens);
    const std::int64_t want_pages = (std::int64_t(n.num_tokens) + page_size - 1) / page_size;
    CODEC_CHECK(n.num_pages == want_pages, "node ", i, " has ", n.num_pages, " pages for ", n.num_tokens,
                " tokens at page_size ", page_size, " (expected ", want_pages, ")");
    CODEC_CHECK(n.page_begin >= 0 && n.page_begin + n.num_pages <= std::int64_t(pages.size()), "node ", i,
                " page range [", n.page_begin, ", ", n.page_begin + n.num_pages, ") exceeds ", pages.size(),
                " pages");
    CODEC_CHECK(n.req_begin >= 0 && n.req_begin + n.num_reqs <= std::int64_t(reqs.size()), "node ", i,
                " request range exceeds ", reqs.size(), " entries");
    CODEC_CHECK(n.num_reqs == expected[i], "node ", i, " lists ", n.num_reqs, " requests but ", expected[i],
                " request paths cross it");
    for (std::int32_t k = 0; k < n.num_reqs; ++k) {
      const std::int32_t r = reqs[n.req_begin + k];
      CODEC_CHECK(r >= 0 && r < num_requests(), "node ", i, " lists request ", r, ", outside [0, ",
                  num_requests(), ")");
      CODEC_CHECK(k == 0 || r > reqs[n.req_begin + k - 1], "node ", i, " request list is not ascending");
      bool on_path = false;
      for (int j = request_node[r]; j >= 0 && !on_path; j = nodes[j].parent) on_path = j == i;
      CODEC_CHECK(on_path, "node ", i, " lists request ", r, " whose path does not cross it");
    }
  }
}

namespace {

// Radix-tree vertex during derivation: a run of pages copied from the page
// list of the first request that created it.
struct Vertex {
  std::int32_t parent;
  std::int32_t src_request;
  std::int32_t src_offset;  // first page of the run within that request's list
  std::int32_t length;      // pages in the run
};

// Children are found by (parent, first page, tokens in that page): a page is
// shared only at the same path position and fill.
struct EdgeKey {
  std::int32_t parent, page, fill;
  bool operator==(const EdgeKey&) const = default;
};
struct EdgeKeyHash {
  std::size_t operator()(const EdgeKey& k) const {
    std::uint64_t h = (std::uint64_t(std::uint32_t(k.parent)) << 32) ^ std::uint32_t(k.page);
    h ^= std::uint64_t(std::uint32_t(k.fill)) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return std::size_t(h ^ (h >> 29));
  }
};

}  // namespace

Forest derive_forest(const PageTable& table) {
  table.validate();
  const int batch = table.num_requests();
  const int ps = table.page_size;
  auto page_at = [&](int r, std::int32_t j) { return table.indices[table.indptr[r] + j]; };
  auto num_pages = [&](int r) { return table.indptr[r + 1] - table.indptr[r]; };
  auto fill_at = [&](int r, std::int32_t j) { return j == num_pages(r) - 1 ? table.last_page_len[r] : ps; };

  std::vector<Vertex> vertices;
  std::unordered_map<EdgeKey, std::int32_t, EdgeKeyHash> children;
  children.reserve(std::size_t(batch) * 4);
  std::vector<std::int32_t> terminal(batch);

  for (int r = 0; r < batch; ++r) {
    const std::int32_t n = num_pages(r);
    std::int32_t cur = -1, j = 0;
    while (j < n) {
      const EdgeKey key{cur, page_at(r, j), fill_at(r, j)};
      auto it = children.find(key);
      if (it == children.end()) {  // nothing shares the rest of this request
        vertices.push_back({cur, r, j, n - j});
        children.emplace(key, std::int32_t(vertices.size() - 1));
        cur = std::int32_t(vertices.size() - 1);
        break;
      }
      const std::int32_t c = it->second;
      const Vertex v = vertices[c];
      // Match page ids with one vectorisable scan; fills can differ only at
      // the last page of either request, so check the last matched page alone.
      const std::int32_t* mine = table.indices.data() + table.indptr[r] + j;
      const std::int32_t* theirs = table.indices.data() + table.indptr[v.src_request] + v.src_offset;
      const std::int32_t span = std::min(v.length, n - j);
      std::int32_t k = std::memcmp(mine, theirs, std::size_t(span) * sizeof(std::int32_t)) == 0
                           ? span  // the common case, at memory speed
                           : std::int32_t(std::mismatch(mine, mine + span, theirs).first - mine);
      if (fill_at(r, j + k - 1) != fill_at(v.src_request, v.src_offset + k - 1)) --k;  // k ≥ 1: the key matched
      if (k < v.length) {  // diverges or ends inside the run: split it, prefix becomes the parent
        vertices.push_back({v.parent, v.src_request, v.src_offset, k});
        const std::int32_t prefix = std::int32_t(vertices.size() - 1);
        it->second = prefix;
        vertices[c].parent = prefix;
        vertices[c].src_offset += k;
        vertices[c].length -= k;
        const std::int32_t first = v.src_offset + k;
        children.emplace(EdgeKey{prefix, page_at(v.src_request, first), fill_at(v.src_request, first)}, c);
        cur = prefix;
      } else {
        cur = c;
      }
      j += k;
    }
    terminal[r] = cur;
  }

  // Splits create parents after their children: renumber by depth (stable in
  // creation order), which puts parents first and keeps numbering deterministic.
  const std::int32_t nv = std::int32_t(vertices.size());
  std::vector<std::int32_t> depth(nv, -1);
  std::int32_t max_depth = 0;
  for (std::int32_t i = 0; i < nv; ++i) {
    std::int32_t up = i, steps = 0;
    while (up >= 0 && depth[up] < 0) up = vertices[up].parent, ++steps;
    std::int32_t d = (up < 0 ? -1 : depth[up]) + steps;
    for (std::int32_t x = i; x != up; x = vertices[x].parent) depth[x] = d--;
    max_depth = std::max(max_depth, depth[i]);
  }
  std::vector<std::int32_t> by_depth(max_depth + 2, 0);
  for (std::int32_t i = 0; i < nv; ++i) ++by_depth[depth[i] + 1];
  for (std::size_t d = 1; d < by_depth.size(); ++d) by_depth[d] += by_depth[d - 1];
  std::vector<std::int32_t> new_id(nv), order(nv);
  for (std::int32_t i = 0; i < nv; ++i) new_id[i] = by_depth[depth[i]]++, order[new_id[i]] = i;

  Forest forest;
  forest.page_size = ps;
  forest.nodes.resize(nv);
  forest.request_node.resize(batch);
  std::int64_t page_cursor = 0;
  for (std::int32_t id = 0; id < nv; ++id) {
    const Vertex& v = vertices[order[id]];
    ForestNode& node = forest.nodes[id];
    node.parent = v.parent < 0 ? -1 : new_id[v.parent];
    node.num_pages = v.length;
    node.num_tokens = (v.length - 1) * ps + fill_at(v.src_request, v.src_offset + v.length - 1);
    node.page_begin = page_cursor;
    page_cursor += v.length;
  }
  forest.pages.resize(page_cursor);
  for (std::int32_t id = 0; id < nv; ++id) {
    const Vertex& v = vertices[order[id]];
    const std::int32_t* src = table.indices.data() + table.indptr[v.src_request] + v.src_offset;
    std::copy(src, src + v.length, forest.pages.begin() + forest.nodes[id].page_begin);
  }
  // Request lists: count along every path, prefix-sum, then fill in request order.
  for (int r = 0; r < batch; ++r) {
    forest.request_node[r] = new_id[terminal[r]];
    for (int i = forest.request_node[r]; i >= 0; i = forest.nodes[i].parent) ++forest.nodes[i].num_reqs;
  }
  std::int64_t req_cursor = 0;
  for (ForestNode& node : forest.nodes) node.req_begin = req_cursor, req_cursor += node.num_reqs;
  forest.reqs.resize(req_cursor);
  std::vector<std::int64_t> fill_pos(nv);
  for (std::int32_t id = 0; id < nv; ++id) fill_pos[id] = forest.nodes[id].req_begin;
  for (int r = 0; r < batch; ++r)
    for (int i = forest.request_node[r]; i >= 0; i = forest.nodes[i].parent) forest.reqs[fill_pos[i]++] = r;
  return forest;
}

Forest flatten(const Forest& forest) {
  Forest flat;
  flat.page_size = forest.page_size;
  flat.request_node.resize(forest.num_requests());
  std::vector<int> path;
  for (int r = 0; r < forest.num_requests(); ++r) {
    path.clear();
    for (int i = forest.request_node[r]; i >= 0; i = forest.nodes[i].parent) path.push_back(i);
    std::int32_t parent = -1;
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const ForestNode& src = forest.nodes[*it];
      ForestNode node = src;
      node.parent = parent;
      node.page_begin = std::int64_t(flat.pages.size());
      node.req_begin = std::int64_t(flat.reqs.size());
      node.num_reqs = 1;
      flat.pages.insert(flat.pages.end(), forest.pages.begin() + src.page_begin,
                        forest.pages.begin() + src.page_begin + src.num_pages);
      flat.reqs.push_back(r);
      flat.nodes.push_back(node);
      parent = std::int32_t(flat.nodes.size() - 1);
    }
    flat.request_node[r] = parent;
  }
  return flat;
}

}  // namespace codec
