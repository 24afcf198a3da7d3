#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "codec/core/error.hpp"
#include "codec/forest/forest.hpp"
#include "support/forest_signature.hpp"
#include "support/random_batch.hpp"
#include "support/throws_with.hpp"

namespace codec {
namespace {

struct Csr {
  std::vector<std::int32_t> indptr{0}, indices, last;
  int page_size = 16;
  std::int64_t num_pages = 64;
  void add(std::vector<std::int32_t> pages, std::int32_t last_len) {
    indices.insert(indices.end(), pages.begin(), pages.end());
    indptr.push_back(std::int32_t(indices.size()));
    last.push_back(last_len);
  }
  PageTable table() const { return {indptr, indices, last, page_size, num_pages}; }
};

std::vector<std::int32_t> path_pages(const Forest& f, int r) {
  std::vector<int> path;
  for (int i = f.request_node[r]; i >= 0; i = f.nodes[i].parent) path.push_back(i);
  std::vector<std::int32_t> pages;
  for (auto it = path.rbegin(); it != path.rend(); ++it)
    for (int p = 0; p < f.nodes[*it].num_pages; ++p) pages.push_back(f.pages[f.nodes[*it].page_begin + p]);
  return pages;
}

TEST(DeriveForest, FindsSharedPrefixAndBranches) {
  Csr c;
  c.add({0, 1, 2}, 16);
  c.add({0, 1, 3}, 5);
  c.add({0, 1}, 16);
  const Forest f = derive_forest(c.table());
  f.validate();
  ASSERT_EQ(f.num_nodes(), 3);
  EXPECT_EQ(f.nodes[0].num_tokens, 32);
  EXPECT_EQ(f.nodes[0].num_reqs, 3);
  EXPECT_EQ(f.request_node[2], 0);  // request 2 ends where the others branch
  EXPECT_EQ(f.nodes[f.request_node[1]].num_tokens, 5);
  EXPECT_EQ(f.unique_tokens(), 32 + 16 + 5);
  EXPECT_EQ(f.flat_tokens(), 48 + 37 + 32);
}

TEST(DeriveForest, PageWithDifferentFillIsNotShared) {
  Csr c;
  c.add({0, 1}, 5);       // page 1 holds 5 tokens for this request
  c.add({0, 1, 2}, 16);   // and 16 for this one
  const Forest f = derive_forest(c.table());
  f.validate();
  ASSERT_EQ(f.num_nodes(), 3);
  EXPECT_EQ(f.nodes[0].num_tokens, 16);
  EXPECT_EQ(f.nodes[0].num_reqs, 2);
  EXPECT_EQ(f.request_tokens(0), 21);
  EXPECT_EQ(f.request_tokens(1), 48);
}

TEST(DeriveForest, IdenticalRequestsShareTheirPartialLastPage) {
  Csr c;
  c.add({4, 5}, 7);
  c.add({4, 5}, 7);
  const Forest f = derive_forest(c.table());
  ASSERT_EQ(f.num_nodes(), 1);
  EXPECT_EQ(f.nodes[0].num_tokens, 23);
  EXPECT_EQ(f.nodes[0].num_reqs, 2);
}

TEST(DeriveForest, NothingSharedGivesOneNodePerRequest) {
  Csr c;
  for (int r = 0; r < 5; ++r) c.add({2 * r, 2 * r + 1}, r + 1);
  const Forest f = derive_forest(c.table());
  EXPECT_EQ(f.num_nodes(), 5);
  for (const ForestNode& n : f.nodes) EXPECT_EQ(n.num_reqs, 1);
}

TEST(DeriveForest, RandomForestsAreExactAndMaximal) {
  for (int page_size : {1, 3, 7, 16}) {
    for (std::uint64_t seed = 1; seed <= 25; ++seed) {
      test::RandomBatchSpec spec;
      spec.seed = seed;
      spec.page_size = page_size;
      spec.num_nodes = 1 + int(seed % 9);
      spec.num_requests = 1 + int(seed * 7 % 13);
      spec.heads = {4, 4, 64};
      const test::RandomBatch b = test::make_random_batch(spec);
      const PageTable t = b.table();
      const Forest f = derive_forest(t);
      SCOPED_TRACE(spec.describe());
      ASSERT_NO_THROW(f.validate());
      std::vector<int> children(f.num_nodes(), 0), ends(f.num_nodes(), 0);
      for (const ForestNode& n : f.nodes)
        if (n.parent >= 0) ++children[n.parent];
      for (int r = 0; r < f.num_requests(); ++r) {
        ++ends[f.request_node[r]];
        const std::vector<std::int32_t> expect(t.indices.begin() + t.indptr[r], t.indices.begin() + t.indptr[r + 1]);
        EXPECT_EQ(path_pages(f, r), expect) << "request " << r;
        EXPECT_EQ(f.request_tokens(r), t.request_tokens(r)) << "request " << r;
      }
      for (int i = 0; i < f.num_nodes(); ++i) {
        // a node with one child and no request ending in it would not be maximal
        EXPECT_FALSE(children[i] == 1 && ends[i] == 0) << "node " << i << " is not maximal";
        EXPECT_GT(f.nodes[i].num_tokens, 0);
      }
    }
  }
}

TEST(DeriveForest, RequestOrderDoesNotMatter) {
  test::RandomBatchSpec spec;
  spec.seed = 11;
  spec.num_nodes = 8;
  spec.num_requests = 12;
  const test::RandomBatch b = test::make_random_batch(spec);
  const Forest f = derive_forest(b.table());
  std::vector<int> perm(spec.num_requests);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(perm.begin(), perm.end(), rng);
    Csr c;
    c.page_size = spec.page_size;
    c.num_pages = b.num_pages;
    for (int r : perm)
      c.add({b.indices.begin() + b.indptr[r], b.indices.begin() + b.indptr[r + 1]}, b.last_page_len[r]);
    const Forest g = derive_forest(c.table());
    // request j of g is request perm[j] of f
    EXPECT_EQ(test::forest_signature(g, perm), test::forest_signature(f));
  }
}

TEST(DeriveForest, Flatten) {
  test::RandomBatchSpec spec;
  spec.seed = 5;
  const test::RandomBatch b = test::make_random_batch(spec);
  const Forest f = derive_forest(b.table());
  const Forest flat = flatten(f);
  ASSERT_NO_THROW(flat.validate());
  for (const ForestNode& n : flat.nodes) EXPECT_EQ(n.num_reqs, 1);
  EXPECT_EQ(flat.unique_tokens(), f.flat_tokens());
  for (int r = 0; r < f.num_requests(); ++r) EXPECT_EQ(path_pages(flat, r), path_pages(f, r));
}

void expect_error(const Csr& c, const std::string& fragment) {
  try {
    derive_forest(c.table());
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(DeriveForest, BadInput) {
  Csr c;
  c.add({0, 1}, 3);
  Csr bad = c;
  bad.indices[1] = 64;
  expect_error(bad, "page index 64 at kv_indices[1] (request 0) is outside [0, num_pages = 64)");
  bad = c;
  bad.indices[0] = -2;
  expect_error(bad, "page index -2");
  bad = c;
  bad.last[0] = 0;
  expect_error(bad, "kv_last_page_len[0] = 0 is outside [1, page_size = 16]");
  bad = c;
  bad.last[0] = 17;
  expect_error(bad, "kv_last_page_len[0] = 17");
  bad = c;
  bad.page_size = 0;
  expect_error(bad, "page_size 0 must be >= 1");
  bad = c;
  bad.add({}, 1);
  expect_error(bad, "request 1 has no pages");
  bad = c;
  bad.indptr.back() = 5;
  expect_error(bad, "kv_indptr[1] = 5 does not match the 2 entries of kv_indices");
  bad = c;
  bad.last.push_back(1);
  expect_error(bad, "kv_last_page_len has 2 entries, expected 1");
  Csr none;
  expect_error(none, "at least one request");
}

// A padded block table (rows of 4 columns, stride 5; rows 2 and 3 padding)
// gives the CSR page table of its leading rows, from lengths or prefix sums.
TEST(BlockTable, GivesThePageTableOfItsRowsWithTokens) {
  const std::vector<std::int32_t> blocks = {7, 8, 9, -1, 99,  //
                                            7, 3, -1, -1, 99,  //
                                            -1, -1, -1, -1, 99,  //
                                            -1, -1, -1, -1, 99};
  const std::vector<std::int32_t> lens = {40, 17, 0, 0}, cumulative = {0, 40, 57, 57, 57};
  for (const bool cu : {false, true}) {
    const BlockTable t{blocks.data(), 4, 4, 5, cu ? cumulative.data() : lens.data(), cu};
    const PageTableArrays a = page_table_from_block_table(t, 16, 10);
    EXPECT_EQ(a.indptr, (std::vector<std::int32_t>{0, 3, 5}));
    EXPECT_EQ(a.indices, (std::vector<std::int32_t>{7, 8, 9, 7, 3}));
    EXPECT_EQ(a.last_page_len, (std::vector<std::int32_t>{8, 1}));
    a.view().validate();
    EXPECT_EQ(derive_forest(a.view()).num_nodes(), 3);  // page 7 shared, then each request's own
  }
  const std::vector<std::int32_t> none = {0, 0, 0, 0};
  EXPECT_EQ(page_table_from_block_table({blocks.data(), 4, 4, 5, none.data(), false}, 16, 10).indptr.size(), 1u);
}

TEST(BlockTable, BadInputNamesTheRowAndValue) {
  const std::vector<std::int32_t> blocks = {7, 8, 9, -1, 7, 3, -1, -1};
  auto table = [&](std::vector<std::int32_t> lens, std::int64_t pages = 10) {
    return [=] { page_table_from_block_table({blocks.data(), 2, 4, 4, lens.data(), false}, 16, pages); };
  };
  EXPECT_TRUE(test::throws_with(table({0, 5}), "block table row 1 has 5 KV tokens after row 0 with none"));
  EXPECT_TRUE(test::throws_with(table({5, -3}), "block table row 1 has -3 KV tokens; lengths must be >= 0"));
  EXPECT_TRUE(test::throws_with(table({65, 1}), "block table row 0 has 65 KV tokens: 5 pages, more than its 4 columns"));
  EXPECT_TRUE(test::throws_with(table({40, 33}), "block table row 1 column 2 holds page -1, outside [0, num_pages = 10)"));
  EXPECT_TRUE(test::throws_with(table({40, 1}, 9), "block table row 0 column 2 holds page 9"));
  EXPECT_TRUE(test::throws_with([&] { page_table_from_block_table({blocks.data(), 2, 4, 3, blocks.data(), false}, 16, 9); },
                                "row_stride 3 is less than its 4 columns"));
  // Cumulative lengths far apart give a row more tokens than a request may hold.
  const std::vector<std::int32_t> cumulative = {-2147483647 - 1, 2147483647, 2147483647};
  EXPECT_TRUE(test::throws_with(
      [&] { page_table_from_block_table({blocks.data(), 2, 4, 4, cumulative.data(), true}, 1 << 30, 10); },
      "block table row 0 has 4294967295 KV tokens, more than 2147483647"));
}

// Into reused arrays, as a stream planner converts every step: a larger
// table, a table that fails, then a smaller one give what a fresh call gives.
TEST(BlockTable, ReusedArraysHoldOnlyTheLastTable) {
  const std::vector<std::int32_t> blocks = {7, 8, 9, -1, 7, 3, -1, -1};
  const std::vector<std::int32_t> both = {40, 17}, bad = {40, 33}, one = {5, 0};
  PageTableArrays reused;
  page_table_from_block_table({blocks.data(), 2, 4, 4, both.data(), false}, 16, 10, reused);
  EXPECT_EQ(reused.indices, (std::vector<std::int32_t>{7, 8, 9, 7, 3}));
  EXPECT_TRUE(test::throws_with([&] { page_table_from_block_table({blocks.data(), 2, 4, 4, bad.data(), false}, 16, 10,
                                                                  reused); },
                                "block table row 1 column 2 holds page -1"));
  page_table_from_block_table({blocks.data(), 2, 4, 4, one.data(), false}, 16, 12, reused);
  const PageTableArrays fresh = page_table_from_block_table({blocks.data(), 2, 4, 4, one.data(), false}, 16, 12);
  EXPECT_EQ(reused.indptr, fresh.indptr);
  EXPECT_EQ(reused.indices, (std::vector<std::int32_t>{7}));
  EXPECT_EQ(reused.last_page_len, fresh.last_page_len);
  EXPECT_EQ(reused.num_pages, 12);
  reused.view().validate();
}

TEST(ForestValidate, CatchesBrokenForests) {
  Csr c;
  c.add({0, 1, 2}, 16);
  c.add({0, 1, 3}, 5);
  const Forest good = derive_forest(c.table());
  Forest f = good;
  f.nodes[1].parent = 2;
  EXPECT_THROW(f.validate(), Error);
  f = good;
  f.nodes[0].num_pages = 3;
  EXPECT_THROW(f.validate(), Error);
  f = good;
  f.nodes[0].num_reqs = 1;
  EXPECT_THROW(f.validate(), Error);
  f = good;
  f.request_node[0] = 7;
  EXPECT_THROW(f.validate(), Error);
}

}  // namespace
}  // namespace codec
