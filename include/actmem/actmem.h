// actmem's public C++ API: a job stated as a user states it (a model and options by name, the CLI's
// flags with '_' for '-'), answered with the numbers or with the text the CLI prints (its --json).
// The standard library only, and the two value headers beside this one (expected.h, values.h): no
// JSON library, no internal header. The Python module is built on this header alone.
//
//   actmem::Job job{.model = "llama-3-70b",
//                   .options = {{"framework", "megatron"}, {"seq_len", int64_t{8192}}, {"tp", int64_t{8}}}};
//   actmem::Expected<actmem::Totals> t = actmem::evaluate(job);     // t->total: bytes per GPU
//   actmem::Expected<std::string> json = actmem::estimate_json(job); // `actmem estimate --json`
//   if (!json) std::puts(json.error().message.c_str());              // "@tp 3: num_attention_heads ..."
//
// Errors carry a kind and the option at fault; messages write options as `@tp`, which a front end
// spells its own way with render_message() (expected.h). docs/api.md has the whole of it; the
// options are in docs/options.md (`actmem options`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actmem/expected.h"  // Expected<T>, Error, ErrorKind, render_message()
#include "actmem/values.h"    // OptionValue; Totals: one layout's per-GPU memory as plain numbers

namespace actmem {

/// One option by name: {"tp", int64_t{8}}, {"recompute", "selective"}, {"gpu", "h100-80gb"}.
struct Option {
  std::string name;
  OptionValue value;
  std::string given = {};  // as the user wrote it, for the echo of what overrides `from` (default name=value)
};

/// A job: the model, and the options as the CLI's subcommand takes them. Options set later win; on
/// `from` they override the file's settings (and the JSON's "config" says so).
struct Job {
  std::string model;        // a preset ("llama-3-70b") or a config.json path; may be empty with `from`
  std::string config_json;  // or a config.json's text: then `model` is only the name it is shown by
  std::string from;         // a training config (estimate, explain) or a `vllm serve` line (serve): a path
  std::vector<Option> options;
  std::string origin = "the options";  // who gave them, in that echo ("the keywords" in Python)
};

/// `actmem estimate --json`: the training estimate; with a machine option (gpu, gpu_memory, ...)
/// the fit verdict and what to change, as `estimate --gpu ... --json`.
Expected<std::string> estimate_json(const Job& job);
/// `actmem explain`: every term as `label: formula = values = bytes`.
Expected<std::string> explain_text(const Job& job);
/// The training estimate's numbers (the `memory.*_bytes` of estimate_json), without the text.
Expected<Totals> evaluate(const Job& job);
/// `actmem serve --json`: weights, activations and KV cache of a serving job (context_len needed).
Expected<std::string> serve_json(const Job& job);
/// `actmem serve --generate --json`: HF generate() on one GPU (prompt_len, new_tokens, batch, dtype,
/// attention).
Expected<std::string> generate_json(const Job& job);
/// `actmem plan --json`: the fastest layouts that fit (gpus, gpu, global_batch, ...). A plan in which
/// nothing fits is a result (its "closest"), not an error.
Expected<std::string> plan_json(const Job& job);
/// `actmem options --json`: the training option table, each option's value under `options`.
Expected<std::string> options_json(const std::vector<Option>& options);

/// One layout after another on one prepared model: the model and its workload options (framework,
/// dtypes, attention, ...) once, then each layout's options (seq_len, tp, recompute, ...) by name.
///   auto e = actmem::Estimator::prepare({.model = "llama-3-8b"}).value();
///   for (int64_t tp : {1, 2, 4, 8}) e.evaluate({{"tp", tp}})->total;
class Estimator {
 public:
  /// The job's model and options: its layout options are the defaults each evaluate() starts from.
  static Expected<Estimator> prepare(const Job& job);
  /// The layout options over the job's; a workload option here is refused by name (prepare again).
  Expected<Totals> evaluate(const std::vector<Option>& layout) const;

 private:
  struct State;
  std::shared_ptr<const State> state_;
};

/// The option tables by name: "training" (estimate, explain), "serve", "plan", "machine".
struct OptionHelp {
  std::string name;  // "seq_len"
  std::string help;  // one sentence, other options as @name
};
Expected<std::vector<OptionHelp>> option_help(std::string_view table);
/// The built-in models (`actmem presets`), by name.
std::vector<std::string> preset_names();

}  // namespace actmem
