// The library as this repository's own front ends use it: the CLI (tools/cli), the web page's
// WebAssembly binding (web/), the benchmarks (bench/) and the fuzz targets (fuzz/). It is the top
// layer (tests/check_layers.py): nothing in src/ includes it, and it only gathers the headers of the
// pipeline's stages, in their order. Programs outside this repository use the small public header,
// include/actmem/actmem.h, which includes none of these (docs/api.md).
//
//   auto model = actmem::load_model("llama-3-70b").value();            // preset or config.json path
//   auto prepared = actmem::prepare(model, {.framework = actmem::Framework::kMegatron}).value();
//   actmem::Totals t;
//   if (actmem::evaluate(prepared, {.seq_len = 8192, .parallel = {.dp = 8, .tp = 8}}, t))
//     use(t.total);                                      // plain numbers, no strings, no allocation
//   auto report = actmem::explain(prepared, layout).value();   // every term: formula = values = bytes
//   std::string json = actmem::report_json(report).dump(2);
#pragma once

#include "actmem/actmem.h"  // the public API: jobs by option name, answers as the CLI's JSON
#include "actmem/expected.h"
#include "actmem/values.h"
#include "util/bytes.h"
#include "util/dtype.h"
#include "util/spellcheck.h"   // closest_name(): "did you mean ...?" for a front end's own names
#include "util/text_table.h"   // TextTable, group_digits: the tables every front end prints
#include "runtime/allocator_trace.h"  // replay_trace(): PyTorch's caching allocator over a trace (`allocator`)
#include "model/hf_config.h"   // parse_hf_config(): a config.json given as text
#include "model/model_spec.h"
#include "model/presets.h"
#include "model/encoder_head.h"  // set_encoder_head(): --head for encoders (bert, roberta)
#include "policies/options.h"
#include "policies/option_table.h"  // set_training_option(): options by name (Python keywords)
#include "policies/finetune.h"      // parse_lora_targets(), the LoRA target bits
#include "engine/prepared.h"        // prepare(), evaluate(), explain()
#include "engine/training.h"
#include "engine/timeline.h"        // step_timeline(): the step as allocations and frees (--timeline)
#include "report/render.h"          // report_json(), render_table(), render_explain()
#include "config/training_config.h"  // load_training_config(): a training config (--from) as input
#include "config/megatron_theory.h"  // megatron_theoretical_memory(): Megatron's own report, side by side
#include "serve/gpu_catalog.h"
#include "serve/serve.h"
#include "serve/serve_render.h"   // serve_json(), render_serve(): serving's renderers
#include "serve/serve_request.h"  // ServeRequest, serve(): a serving job as a user states it
#include "serve/vllm_command.h"   // read_vllm_command(): a `vllm serve` line as input (`serve --from`)
#include "serve/generate.h"       // estimate_generate(): HF generate() on one GPU (`serve --generate`)
#include "planner/plan.h"         // the planner: fit verdict, time model, layout search
#include "planner/plan_json.h"    // fit_json(), plan_json(): the planner's JSON every front end shares
#include "planner/machine.h"      // MachineOptions, to_machine(), fit_report_json(): the GPU a job runs on
#include "planner/plan_options.h"  // PlanOptions, to_plan_request(): `plan` as front ends take it
