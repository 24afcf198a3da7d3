// Plans and planning: the planner of a wrapper (the library's planner setup)
// and its plans, the forest of page tables, the forest manager, tensor-parallel
// head slices.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <tuple>

#include "bindings/plans.hpp"
#include "codec/core/error.hpp"
#include "codec/forest/forest.hpp"
#include "codec/forest/forest_manager.hpp"
#include "codec/plan/planner.hpp"
#include "codec/plan/queries.hpp"

namespace codec::bindings {

nb::dict stats_of(const PlanStats& s) {
  nb::dict d;
  d["num_requests"] = s.num_requests;  // query rows
  d["batch_requests"] = s.batch_requests;
  d["num_nodes"] = s.num_nodes;
  d["num_tasks"] = s.num_tasks;
  d["num_wide_tasks"] = s.num_wide_tasks;
  d["num_blocks"] = s.num_blocks;
  d["num_slots"] = s.num_slots;
  d["max_splits"] = s.max_splits;
  d["merged_requests"] = s.merged_requests;
  d["num_tails"] = s.num_tails;
  d["makespan_us"] = s.makespan_us;
  d["lower_bound_us"] = s.lower_bound_us;
  d["merge_us"] = s.merge_us;
  d["plan_ms"] = s.plan_ms;
  d["kv_tokens_read"] = s.kv_tokens_read;
  d["unique_kv_tokens"] = s.unique_kv_tokens;
  return d;
}

Planner::Planner(const std::string& engine, int device, int num_qo_heads, int num_kv_heads, int head_dim,
                 int page_size, const std::string& dtype, float sm_scale, std::size_t workspace_bytes, int max_requests,
                 std::int64_t max_page_entries, int num_threads, const std::string& cost_table,
                 const std::vector<std::string>& cost_table_dirs, int max_query_tokens, std::int64_t max_mask_bytes,
                 const std::string& q_dtype, float logits_soft_cap)
    : engine_{engine == "cuda", device} {
  CODEC_CHECK(engine == "cpu" || engine == "cuda", "engine '", engine, "' is not cpu or cuda");
  CODEC_CHECK(sm_scale > 0, "sm_scale ", sm_scale, " must be > 0");  // no "0: the default" in Python
  const DType d = parse_dtype_name(dtype), q = q_dtype.empty() ? d : parse_dtype_name(q_dtype);
  PlannerSetupArgs args;
  args.target = engine_.cuda ? PlanTarget::cuda : PlanTarget::cpu;
  args.cpu_threads = num_threads;
  args.shape = {num_qo_heads, num_kv_heads, head_dim, head_dim, sm_scale, q, d, page_size, logits_soft_cap};
  args.workspace = {workspace_bytes, max_requests, max_page_entries, max_query_tokens, max_mask_bytes};
  args.cost_table = cost_table;
  args.table_dirs = cost_table_dirs;
  const DeviceScope scope(engine_);
  setup_ = make_planner_setup(args);
  if (engine_.cuda) staging_ = std::make_unique<CudaPlanStaging>();
}

QueryMask query_mask(const std::string& name) {
  if (name == "none") return QueryMask::none;
  if (name == "causal") return QueryMask::causal;
  if (name == "custom") return QueryMask::custom;
  if (name == "draft") return QueryMask::draft;
  CODEC_FAIL("mask '", clip(name), "' is not none, causal, custom or draft");
}

std::unique_ptr<PyPlan> Planner::plan(const HostInts& indptr, const HostInts& indices, const HostInts& last_page_len,
                                      std::int64_t num_pages, const std::optional<HostInts>& qo_indptr,
                                      const std::string& mask, const std::optional<HostBytes>& mask_bits,
                                      int window_left) const {
  const PageTable table{{indptr.data(), indptr.size()}, {indices.data(), indices.size()},
                        {last_page_len.data(), last_page_len.size()}, setup_.shape.page_size, num_pages};
  QueryBatch queries;
  queries.mask = query_mask(mask);
  if (qo_indptr) queries.qo_indptr = {qo_indptr->data(), qo_indptr->size()};
  if (mask_bits) queries.mask_bits = {mask_bits->data(), mask_bits->size()};
  queries.window_left = window_left;
  nb::gil_scoped_release release;
  table.validate();
  const Forest forest = derive_forest(table);
  queries.validate(request_lengths(forest));
  const PlannerOptions options = setup_.options_for(forest, std::int64_t(indices.size()), queries);
  return std::make_unique<PyPlan>(
      PyPlan{make_plan(forest, setup_.heads(), setup_.kv_dtype(), *setup_.cost, options, queries), engine_,
             setup_.shape.q_dtype});
}

std::string Planner::describe() const {
  const PlannerOptions& o = setup_.options;
  std::string s = engine_.name() + ", " + std::to_string(o.num_blocks) + " blocks, " + setup_.cost->describe();
  if (o.capacity)
    s += ", capacity " + std::to_string(o.capacity->requests) + (o.capacity->masks ? " query tokens / " : " requests / ") +
         std::to_string(o.capacity->slots) + " slots";
  return s;
}

namespace {

nb::dict forest_dict(const Forest& f) {
  std::vector<std::int32_t> parent, tokens, page_begin, pages_n, req_begin, reqs_n;
  for (const ForestNode& n : f.nodes) {
    parent.push_back(n.parent);
    tokens.push_back(n.num_tokens);
    page_begin.push_back(std::int32_t(n.page_begin));
    pages_n.push_back(n.num_pages);
    req_begin.push_back(std::int32_t(n.req_begin));
    reqs_n.push_back(n.num_reqs);
  }
  nb::dict d;
  d["page_size"] = f.page_size;
  d["parent"] = numpy_of(std::move(parent));
  d["num_tokens"] = numpy_of(std::move(tokens));
  d["page_begin"] = numpy_of(std::move(page_begin));
  d["num_pages"] = numpy_of(std::move(pages_n));
  d["req_begin"] = numpy_of(std::move(req_begin));
  d["num_reqs"] = numpy_of(std::move(reqs_n));
  d["pages"] = numpy_of(std::vector<std::int32_t>(f.pages));
  d["reqs"] = numpy_of(std::vector<std::int32_t>(f.reqs));
  d["request_node"] = numpy_of(std::vector<std::int32_t>(f.request_node));
  return d;
}

nb::dict derive(const HostInts& indptr, const HostInts& indices, const HostInts& last_page_len, int page_size) {
  std::int64_t num_pages = 1;
  for (std::size_t i = 0; i < indices.size(); ++i) num_pages = std::max<std::int64_t>(num_pages, indices.data()[i] + 1);
  const PageTable table{{indptr.data(), indptr.size()}, {indices.data(), indices.size()},
                        {last_page_len.data(), last_page_len.size()}, page_size, num_pages};
  return forest_dict(derive_forest(table));
}

using Effects = std::tuple<nb::ndarray<nb::numpy, std::int32_t>, std::int64_t, std::int64_t>;
Effects effects_of(KvEffects e) {
  std::vector<std::int32_t> flat;
  for (const PageCopy& c : e.copies) flat.insert(flat.end(), {c.src, c.dst, c.num_tokens});
  const std::size_t n = e.copies.size();
  return {numpy_of(std::move(flat), {n, 3}), e.write_begin, e.write_end};
}

}  // namespace

void bind_planning(nb::module_& m) {
  nb::class_<PyPlan>(m, "Plan")
      .def_prop_ro("num_requests", [](const PyPlan& p) { return p.plan.num_requests(); })
      .def_prop_ro("covered_requests", [](const PyPlan& p) { return p.plan.view().num_requests; })
      .def_prop_ro("dtype", [](const PyPlan& p) { return dtype_name(p.plan.dtype()); })
      .def_prop_ro("q_dtype", [](const PyPlan& p) { return dtype_name(p.q_dtype); })
      .def_prop_ro("page_size", [](const PyPlan& p) { return p.plan.page_size(); })
      .def_prop_ro("num_qo_heads", [](const PyPlan& p) { return p.plan.heads().num_qo_heads; })
      .def_prop_ro("num_kv_heads", [](const PyPlan& p) { return p.plan.heads().num_kv_heads; })
      .def_prop_ro("head_dim", [](const PyPlan& p) { return p.plan.heads().head_dim; })
      .def_prop_ro("max_page", [](const PyPlan& p) { return p.plan.extent().max_page; })
      .def_prop_ro("masked_tasks", [](const PyPlan& p) { return p.plan.extent().masked_tasks; })
      .def_prop_ro("engine", [](const PyPlan& p) { return p.engine.name(); })
      .def_prop_ro("stats", [](const PyPlan& p) { return stats_of(p.plan.stats()); });

  nb::class_<Planner>(m, "Planner")
      .def(nb::init<const std::string&, int, int, int, int, int, const std::string&, float, std::size_t, int,
                    std::int64_t, int, const std::string&, const std::vector<std::string>&, int, std::int64_t,
                    const std::string&, float>(),
           nb::arg("engine"), nb::arg("device"), nb::arg("num_qo_heads"), nb::arg("num_kv_heads"), nb::arg("head_dim"),
           nb::arg("page_size"), nb::arg("dtype"), nb::arg("sm_scale"), nb::arg("workspace_bytes"),
           nb::arg("max_requests"), nb::arg("max_page_entries"), nb::arg("num_threads"), nb::arg("cost_table") = "",
           nb::arg("cost_table_dirs") = std::vector<std::string>(), nb::arg("max_query_tokens") = 0,
           nb::arg("max_mask_bytes") = 0, nb::arg("q_dtype") = "", nb::arg("logits_soft_cap") = 0.f)
      .def("plan", &Planner::plan, nb::arg("indptr"), nb::arg("indices"), nb::arg("last_page_len"),
           nb::arg("num_pages"), nb::arg("qo_indptr").none() = nb::none(), nb::arg("mask") = "causal",
           nb::arg("mask_bits").none() = nb::none(), nb::arg("window_left") = -1)
      .def("upload", &Planner::upload, nb::arg("plan"), nb::arg("workspace"), nb::arg("stream"))
      .def("stream_plan", &Planner::stream_plan, nb::arg("block_table"), nb::arg("seq_lens"), nb::arg("cumulative"),
           nb::arg("num_pages"), nb::arg("workspace"), nb::arg("stream"), nb::arg("qo_indptr").none() = nb::none(),
           nb::arg("window_left") = -1, nb::arg("mask") = "causal", nb::arg("mask_bits").none() = nb::none())
      .def("capacity_plan", &Planner::capacity_plan)
      .def("take_stream_error", &Planner::take_stream_error)
      .def("stream_stats", &Planner::stream_stats)
      .def_prop_ro("num_blocks", &Planner::num_blocks)
      .def_prop_ro("capacity_slots", &Planner::capacity_slots)
      .def_prop_ro("device_name", &Planner::device_name)
      .def_prop_ro("cost_table", &Planner::cost_table)
      .def("__repr__", [](const Planner& p) { return "<codec._codec.Planner " + p.describe() + ">"; });

  m.def("tensor_parallel_slice", [](int num_qo_heads, int num_kv_heads, int tp_size, int rank) {
    const HeadSlice s = tensor_parallel_slice({num_qo_heads, num_kv_heads, 0, 0.f}, tp_size, rank);
    return std::make_tuple(s.heads.num_qo_heads, s.heads.num_kv_heads, s.qo_begin, s.kv_begin);
  }, nb::arg("num_qo_heads"), nb::arg("num_kv_heads"), nb::arg("tp_size"), nb::arg("rank"));
  m.def("derive_forest", &derive, nb::arg("indptr"), nb::arg("indices"), nb::arg("last_page_len"),
        nb::arg("page_size"));

  nb::class_<ForestManager>(m, "ForestManager")
      .def(nb::init<int, std::int64_t>(), nb::arg("page_size"), nb::arg("num_pages"))
      .def("insert",
           [](ForestManager& f, const HostInts& tokens) {
             KvEffects e;
             const int id = f.insert({tokens.data(), tokens.size()}, &e);
             return std::tuple_cat(std::tuple<int>(id), effects_of(std::move(e)));
           },
           nb::arg("tokens"))
      .def("fork", &ForestManager::fork, nb::arg("request"))
      .def("append",
           [](ForestManager& f, int id, std::int32_t token) {
             KvEffects e;
             f.append(id, token, &e);
             return effects_of(std::move(e));
           },
           nb::arg("request"), nb::arg("token"))
      .def("release", &ForestManager::release, nb::arg("request"))
      .def("alive", &ForestManager::alive, nb::arg("request"))
      .def("pages", [](const ForestManager& f, int id) {
             const auto p = f.pages(id);
             return numpy_of(std::vector<std::int32_t>(p.begin(), p.end()));
           }, nb::arg("request"))
      .def("tokens", [](const ForestManager& f, int id) {
             const auto t = f.tokens(id);
             return numpy_of(std::vector<std::int32_t>(t.begin(), t.end()));
           }, nb::arg("request"))
      .def("live_requests", &ForestManager::live_requests)
      .def("ref_count", &ForestManager::ref_count, nb::arg("page"))
      .def_prop_ro("page_size", &ForestManager::page_size)
      .def_prop_ro("num_pages", &ForestManager::num_pages)
      .def_prop_ro("free_pages", &ForestManager::free_pages)
      .def("page_tables",
           [](const ForestManager& f) {
             ForestManager::Tables t = f.page_tables();
             return std::make_tuple(numpy_of(std::move(t.ids)), numpy_of(std::move(t.indptr)),
                                    numpy_of(std::move(t.indices)), numpy_of(std::move(t.last_page_len)));
           })
      .def("forest", [](const ForestManager& f) { return forest_dict(f.forest()); });
}

}  // namespace codec::bindings
