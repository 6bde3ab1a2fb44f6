#include "planner/plan_json.h"

#include "planner/plan.h"

namespace actmem {

int64_t implied_global_batch(const Layout& l) {
  const auto& p = l.parallel;
  return p.dp * l.micro_batch * (p.num_micro_batches > 0 ? p.num_micro_batches : p.pp);
}

nlohmann::json fit_json(const FitVerdict& v, std::string_view gpu_name, const Allowances& a) {
  return {{"gpu", std::string(gpu_name)},
          {"capacity_bytes", v.capacity.count()},
          {"allowance_bytes", v.allowance.count()},
          {"allowances",
           {{"cuda_context_bytes", v.cuda_context.count()},
            {"nccl_bytes", v.nccl.count()},
            {"nccl_groups", v.nccl_groups},
            {"fragmentation_bytes", v.fragmentation.count()},
            {"fragmentation_fraction", a.fragmentation}}},
          {"needed_bytes", v.needed.count()},
          {"headroom_bytes", v.headroom.count()},
          {"fits", v.fits},
          {"overflow_stage", v.overflow_stage < 0 ? nlohmann::json(nullptr) : nlohmann::json(v.overflow_stage)}};
}

nlohmann::json changes_json(const std::vector<Change>& changes) {
  auto arr = nlohmann::json::array();
  for (const auto& c : changes)
    arr.push_back({{"flags", c.flags},
                   {"saved_bytes", c.saved.count()},
                   {"needed_bytes", c.needed.count()},
                   {"time_cost", c.time_cost},
                   {"fits", c.fits}});
  return arr;
}

void add_fit_json(nlohmann::json& j, const PreparedModel& model, const Report& report, std::string_view gpu_name,
                  Bytes capacity, const Allowances& a, const Cluster& cluster) {
  const FitVerdict v = check_fit(report.totals, report.layout.parallel, capacity, a);
  j["fit"] = fit_json(v, gpu_name, a);
  if (!v.fits)
    j["fit"]["changes"] =
        changes_json(what_to_change(model, report.layout, implied_global_batch(report.layout), capacity, a, cluster));
}

namespace {

nlohmann::json time_terms_json(const PlannedLayout& pl, const Cluster& c) {
  auto arr = nlohmann::json::array();
  for (const auto& term : explain_step_time(pl.time, pl.layout, c))
    arr.push_back({{"label", term.label}, {"formula", term.formula}, {"values", term.values}, {"seconds", term.seconds}});
  return arr;
}

}  // namespace

nlohmann::json planned_layout_json(const PlannedLayout& pl, const std::string& prefix, const std::string& suffix,
                                   const Cluster& c) {
  const Layout& l = pl.layout;
  const auto& p = l.parallel;
  return {{"flags", prefix + " " + layout_flags(l) + suffix},
          {"peak_bytes", pl.totals.total},
          {"needed_bytes", pl.fit.needed.count()},
          {"headroom_bytes", pl.fit.headroom.count()},
          {"step_time_s", pl.time.total},
          {"tokens_per_s_per_gpu", pl.time.tokens_per_s_per_gpu},
          {"mfu", pl.time.mfu},
          {"tflops_per_gpu", pl.time.tflops_per_gpu},
          {"dominant_memory", dominant_memory(pl.totals)},
          {"tp", p.tp},
          {"sp", p.sp},
          {"pp", p.pp},
          {"vpp", p.vpp},
          {"cp", p.cp},
          {"ep", p.ep},
          {"dp", p.dp},
          {"zero", l.zero_stage},
          {"recompute", std::string(kRecomputeNames.name(l.recompute))},
          {"offload_optimizer", l.offload_optimizer},
          {"micro_batch", l.micro_batch},
          {"num_micro_batches", p.num_micro_batches},
          {"first_stage_layers", p.first_stage_layers},
          {"last_stage_layers", p.last_stage_layers},
          {"recompute_layers", l.recompute_layers},
          {"time_terms", time_terms_json(pl, c)}};
}

nlohmann::json plan_json(const PlanResult& result, const PlanRequest& req, std::string_view model_name,
                         std::string_view gpu_name, const std::string& prefix, const std::string& suffix) {
  nlohmann::json j;
  auto layouts = nlohmann::json::array();
  for (const auto& pl : result.best) layouts.push_back(planned_layout_json(pl, prefix, suffix, req.cluster));
  j["plan"] = {{"model", std::string(model_name)},
               {"gpus", req.gpus},
               {"gpus_per_node", req.cluster.gpus_per_node},
               {"gpu", std::string(gpu_name)},
               {"capacity_bytes", req.capacity.count()},
               {"seq_len", req.seq_len},
               {"global_batch", req.global_batch},
               {"searched", result.searched},
               {"refined", result.refined},
               {"valid", result.valid},
               {"fitting", result.fitting},
               {"search_ms", result.search_ms},
               {"layouts", layouts}};
  if (result.closest) j["plan"]["closest"] = planned_layout_json(*result.closest, prefix, suffix, req.cluster);
  if (result.refusal)  // options written @name, as in every error (expected.h)
    j["plan"]["refusal"] = {{"option", result.refusal->field}, {"message", result.refusal->message}};
  return j;
}

}  // namespace actmem
