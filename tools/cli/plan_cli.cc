#include "plan_cli.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli.h"
#include "table_flags.h"  // the workload options, from the library's table

namespace actmem::cli {

namespace {

std::string gib(Bytes b) { return fmt::format("{:.2f}", b.gib()); }

std::string render_fit(const Totals& t, const FitVerdict& v, const Machine& m, int64_t pp) {
  TextTable table;
  const auto row = [&](std::string label, Bytes b, std::string note) {
    table.add_row({{std::move(label)}, {gib(b) + " GiB", true}, {std::move(note)}});
  };
  row(fmt::format("Engine peak (pipeline stage {} of {})", t.peak_stage, pp), Bytes{t.total}, "");
  row("+ CUDA context", v.cuda_context, "--cuda-context (PyTorch #86509: 0.27-0.62 GiB)");
  row(fmt::format("+ NCCL buffers ({} communicator{})", v.nccl_groups, v.nccl_groups == 1 ? "" : "s"), v.nccl, "--nccl-per-group (4 MiB x 2 x 32 channels)");
  row(fmt::format("+ Allocator fragmentation ({:.0f}%)", m.allowances.fragmentation * 100), v.fragmentation,
      "--fragmentation");
  table.add_rule();
  row("= Needed", v.needed, "");
  row(fmt::format("GPU capacity ({})", m.gpu_name.empty() ? "--gpu-memory" : m.gpu_name), v.capacity, "");
  row("Headroom", v.headroom, "");
  std::string out = "\nFit\n" + table.render();
  if (t.reserve > 0)
    out += fmt::format("note: --reserve ({} GiB) is already in the engine's peak; the allowances come on top of it\n",
                       gib(Bytes{t.reserve}));
  if (v.fits)
    out += fmt::format("FITS: {} GiB of headroom ({:.1f}% of the GPU)\n", gib(v.headroom),
                       100.0 * static_cast<double>(v.headroom.count()) / static_cast<double>(v.capacity.count()));
  else
    out += fmt::format("DOES NOT FIT: pipeline stage {} needs {} GiB of {} GiB (over by {} GiB)\n", v.overflow_stage,
                       gib(v.needed), gib(v.capacity), gib(Bytes{-v.headroom.count()}));
  return out;
}

std::string render_changes(const std::vector<Change>& changes, bool has_speeds) {
  if (changes.empty()) return "No single or paired change of recomputation, ZeRO, offload, micro-batch, tp, pp or cp makes it fit.\n";
  std::string out = "\nWhat to change (smallest first)\n";
  TextTable table;
  table.set_max_width(0, 40);  // a 100-column terminal
  for (const auto& c : changes)
    table.add_row({{c.flags},
                   {fmt::format("-{} GiB", gib(c.saved)), true},
                   {has_speeds ? fmt::format("{:+.1f}% step time", 100 * c.time_cost) : std::string("time n/a"), true},
                   {c.fits ? "fits" : fmt::format("still needs {} GiB", gib(c.needed))}});
  return out + table.render();
}

}  // namespace

void add_fit_flags(CLI::App* cmd, FitFlags& f) {
  add_info_flags(
      cmd, machine_options(), [&f](std::string_view name, const OptionValue& v) { return set_machine_option(f, name, v); },
      machine_option_default);
}

int print_with_fit(const PreparedModel& model, const Report& report, const FitFlags& f, bool json,
                   const std::string& rendered, const nlohmann::json& extra) {
  auto machine = to_machine(f);
  if (!machine) return report_error(machine.error());
  if (json) {
    auto j = fit_report_json(model, report, *machine);
    if (extra.is_object())
      for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  const FitVerdict v = check_fit(report.totals, report.layout.parallel, machine->capacity, machine->allowances);
  std::vector<Change> changes;
  if (!v.fits)
    changes = what_to_change(model, report.layout, implied_global_batch(report.layout), machine->capacity,
                             machine->allowances, machine->cluster);
  fmt::print("{}{}", rendered, render_fit(report.totals, v, *machine, report.layout.parallel.pp));
  // A --params model has no FLOPs: no step time to compare.
  if (!v.fits) fmt::print("{}", render_changes(changes, machine->has_speeds && model.model() != nullptr));
  return 0;
}

// ---- actmem plan --------------------------------------------------------------------------------

namespace {

/// `plan`'s flags: the library's PlanOptions (shared with Python's actmem.plan()) and what only the CLI has.
struct PlanFlags {
  PlanOptions o;         // plan_options() and machine_options() flags set it by name as they are parsed
  TableFlags workload;  // the option table's workload options, set into o.training
  std::string from;
  bool json = false, explain = false;
};

std::string layout_summary(const Layout& l) {
  const auto& p = l.parallel;
  std::string s = fmt::format("tp{}{} pp{}", p.tp, p.sp ? "+sp" : "", p.pp);
  if (p.vpp > 1) s += fmt::format("x{}", p.vpp);
  if (p.first_stage_layers > 0 || p.last_stage_layers > 0)  // uneven: layers on the first/last stage
    s += fmt::format("({}/{})", p.first_stage_layers > 0 ? std::to_string(p.first_stage_layers) : "=",
                     p.last_stage_layers > 0 ? std::to_string(p.last_stage_layers) : "=");
  if (p.cp > 1) s += fmt::format(" cp{}", p.cp);
  if (p.ep > 1) s += fmt::format(" ep{}", p.ep);
  s += fmt::format(" dp{}", p.dp);
  return s;
}

std::string render_time(const PlannedLayout& pl, const Cluster& c) {
  std::string out;
  for (const auto& term : explain_step_time(pl.time, pl.layout, c))
    out += wrap(fmt::format("  {}: {} = {} = {:.4f} s", term.label, term.formula, term.values, term.seconds), 100,
                "      ") +
           "\n";
  out += wrap(fmt::format("  step: {:.4f} s; {:.0f} tokens/s per GPU; {:.1f} TFLOP/s per GPU (recomputation "
                          "included); MFU {:.1f}%",
                          pl.time.total, pl.time.tokens_per_s_per_gpu, pl.time.tflops_per_gpu, 100 * pl.time.mfu),
              100, "      ") +
         "\n";
  return out;
}

Expected<PlanOptions> plan_options_of(const PlanFlags& f);

int run_from(const PlanFlags& f) {
  for (const TableFlag& t : f.workload.flags)
    if (t.given())
      return report_error(Error{fmt::format("{} with --from: give it inside --from's flags, which state the job",
                                            t.option->get_name())});
  const auto options = plan_options_of(f);  // --global-batch (the solvers'), --gpu and the allowances
  if (!options) return report_error(options.error());
  auto args = parse_estimate_args(f.from);
  if (!args) return report_error(args.error());
  FitFlags fit = args->fit.given() ? args->fit : options->machine;
  if (!fit.given()) return report_error(Error{"--from: give the GPU (--gpu NAME or --gpu-memory SIZE)"});
  auto machine = to_machine(fit);
  if (!machine) return report_error(machine.error());
  const int64_t batch = options->global_batch.value_or(implied_global_batch(args->layout));
  auto report = explain(args->model, args->layout);
  if (!report) return report_error(report.error());
  const FitVerdict v = check_fit(report->totals, args->layout.parallel, machine->capacity, machine->allowances);
  const auto changes = v.fits ? std::vector<Change>{}
                              : what_to_change(args->model, args->layout, batch, machine->capacity,
                                               machine->allowances, machine->cluster);
  const Layout& l = args->layout;
  const int64_t mb = largest_micro_batch(args->model, l, batch, machine->capacity, machine->allowances);
  const int64_t step = 2 * l.parallel.cp * l.parallel.tp * 128;
  const int64_t seq = longest_sequence(args->model, l, machine->capacity, machine->allowances, step);
  const int64_t layers = fewest_recomputed_layers(args->model, l, machine->capacity, machine->allowances);
  if (f.json) {
    nlohmann::json j;
    j["fit"] = fit_json(v, machine->gpu_name, machine->allowances);
    j["changes"] = changes_json(changes);
    j["solvers"] = {{"largest_micro_batch", mb},
                    {"global_batch", batch},
                    {"longest_seq_len", seq},
                    {"seq_len_step", step},
                    {"fewest_recompute_layers", layers}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{}", render_fit(report->totals, v, *machine, l.parallel.pp));
  if (!v.fits) fmt::print("{}", render_changes(changes, machine->has_speeds));
  fmt::print("\nFit solvers for this layout\n");
  fmt::print("  largest micro-batch that fits (global batch {}): {}\n", batch,
             mb > 0 ? std::to_string(mb) : std::string("none"));
  fmt::print("  longest sequence that fits (multiples of {}): {}\n", step,
             seq > 0 ? std::to_string(seq) : std::string("none"));
  fmt::print("  fewest layers per chunk to recompute in full: {}\n",
             layers >= 0 ? std::to_string(layers) : std::string("none fits"));
  return 0;
}

/// The plan's options: its own and the machine's flags (set as parsed), then the workload flags
/// through the training table, on the planner's defaults.
Expected<PlanOptions> plan_options_of(const PlanFlags& f) {
  PlanOptions o = f.o;
  auto workload = to_settings(f.workload, o.training);
  if (!workload) return workload.error();
  o.training = std::move(*workload);
  return o;
}

/// "19,110 layouts, 19,110 valid, 3,836 fit (+10,768 evaluations ...), searched in 14.2 ms".
std::string search_summary(const PlanResult& r) {
  return fmt::format("{} layouts, {} valid, {} fit{}, searched in {:.1f} ms", group_digits(r.searched),
                     group_digits(r.valid), group_digits(r.fitting),
                     r.refined > 0 ? fmt::format(" (+{} evaluations for the fewest recomputed layers)", group_digits(r.refined))
                                   : std::string(),
                     r.search_ms);
}

int run_plan(const PlanFlags& f) {
  if (!f.from.empty()) return run_from(f);
  auto options = plan_options_of(f);
  if (!options) return report_error(options.error());
  auto setup = to_plan_request(*options);
  if (!setup) return report_error(setup.error());
  const PlanRequest& req = setup->request;
  const Machine& machine = setup->machine;
  const int64_t batch = req.global_batch;
  auto result = plan(setup->model, req);
  if (!result) return report_error(result.error());

  const std::string prefix = "actmem estimate " + setup->flags_prefix;
  const std::string& suffix = setup->flags_suffix;
  const std::string search_line = search_summary(*result);
  if (f.json) {
    fmt::print("{}\n", plan_json(*result, *setup).dump(2));
    return result->fitting > 0 ? 0 : 2;
  }
  if (result->fitting == 0) {
    if (!result->closest) {
      fmt::print("nothing fits: no valid layout of {} on {} GPUs ({}); {}\n", options->model, options->gpus,
                 search_line,
                 result->refusal ? "the first was refused:\n" + render_message(result->refusal->message, flag_of)
                                 : std::string("relax the pins or bounds"));
      return 2;
    }
    const auto& c = *result->closest;
    fmt::print("nothing fits; the closest is {} {}{} (needs {} GiB of {} GiB)\n{}\n", prefix, layout_flags(c.layout),
               suffix, gib(c.fit.needed), gib(c.fit.capacity), search_line);
    return 2;
  }
  fmt::print("{} on {} x {} ({} per node), seq {}, global batch {} sequences ({} tokens)\n\n", options->model,
             options->gpus, machine.gpu_name, req.cluster.gpus_per_node, options->seq_len, batch,
             group_digits(batch * options->seq_len));
  TextTable table;
  table.add_row({{"#"}, {"layout"}, {"ZeRO"}, {"recompute"}, {"b x m"}, {"GiB", true}, {"free", true},
                 {"step s", true}, {"tok/s", true}, {"MFU", true}, {"mostly"}});
  table.add_rule();
  int i = 0;
  for (const auto& pl : result->best) {
    const auto& l = pl.layout;
    table.add_row({{std::to_string(++i)},
                   {layout_summary(l)},
                   {std::to_string(l.zero_stage) + (l.offload_optimizer ? "+off" : "")},
                   {l.recompute == Recompute::kFull && l.recompute_layers >= 0
                        ? fmt::format("full {}", l.recompute_layers)
                        : std::string(kRecomputeNames.name(l.recompute))},
                   {fmt::format("{}x{}", l.micro_batch, l.parallel.num_micro_batches)},
                   {gib(pl.fit.needed), true},
                   {gib(pl.fit.headroom), true},
                   {fmt::format("{:.3f}", pl.time.total), true},
                   {fmt::format("{:.0f}", pl.time.tokens_per_s_per_gpu), true},
                   {fmt::format("{:.1f}%", 100 * pl.time.mfu), true},
                   {dominant_memory(pl.totals)}});
  }
  fmt::print("{}", table.render(""));
  fmt::print("\nGiB = the peak per GPU with the allowances (CUDA context, NCCL, fragmentation); free = what\n"
             "is left of the GPU; tok/s per GPU; mostly = the largest term.{}{} Run each with:\n",
             std::any_of(result->best.begin(), result->best.end(),
                         [](const PlannedLayout& pl) { return pl.layout.recompute_layers >= 0; })
                 ? "\nfull N = the first N layers of each model chunk recomputed (Megatron's block method)."
                 : "",
             std::any_of(result->best.begin(), result->best.end(),
                         [](const PlannedLayout& pl) {
                           return pl.layout.parallel.first_stage_layers > 0 || pl.layout.parallel.last_stage_layers > 0;
                         })
                 ? "\npp16(7/7): uneven stages, 7 layers on the first and the last, the rest split evenly."
                 : "");
  i = 0;
  // Each command wrapped at 100 columns with shell continuations, so it pastes as it is.
  for (const auto& pl : result->best) {
    const std::string command = fmt::format("{}: {} {}{}", ++i, prefix, layout_flags(pl.layout), suffix);
    std::string line = "  ";
    std::size_t start = 0;
    while (start < command.size()) {
      // A flag and its value stay on one line: break only before the next "--".
      std::size_t end = command.find(" --", start);
      if (end == std::string::npos) end = command.size();
      const std::string word = command.substr(start, end - start);
      if (line.size() + word.size() + 3 > 100) {
        fmt::print("{} \\\n", line);
        line = "      ";
      }
      line += (line.back() == ' ' ? "" : " ") + word;
      start = end + 1;
    }
    fmt::print("{}\n", line);
  }
  fmt::print("\n{}\n", search_line);
  if (f.explain) {
    fmt::print("\nStep time of #1 (time model, src/planner/time_model.h)\n{}", render_time(result->best.front(), req.cluster));
  }
  return 0;
}

}  // namespace

std::function<int()> add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  auto* cmd = app.add_subcommand("plan", "Which layout fits N GPUs and runs fastest; --from: what to change");
  cmd->add_option("--model", f->o.model, "config.json path or preset name")->capture_default_str();
  // The plan's own options, from the library's table (shared with Python's plan() keywords).
  add_info_flags(
      cmd, plan_options(), [o = &f->o](std::string_view name, const OptionValue& v) { return set_plan_option(*o, name, v); },
      plan_option_default);
  cmd->add_option("--from", f->from, "your `actmem estimate` flags, quoted: what to change to make it fit");
  cmd->add_flag("--json", f->json, "machine-readable output");
  cmd->add_flag("--explain", f->explain, "the time model's terms for the best layout");
  add_fit_flags(cmd, f->o.machine);
  // The workload's options (framework, attention, dtypes, LoRA, loss, ...): the option table's, as
  // `estimate` has them, with the planner's framework as the default shown.
  add_table_flags(cmd, f->workload, OptionScope::kWorkload, plan_training_defaults());
  return [f] { return run_plan(*f); };
}

}  // namespace actmem::cli
