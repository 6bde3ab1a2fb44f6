#include "report/after_step_report.h"

#include <fmt/format.h>

#include "policies/grad_copies.h"
#include "policies/pipeline_inputs.h"
#include "util/text_table.h"  // group_digits

namespace actmem::detail {

/// Megatron with pp > 1: what the last stage (the rank Megatron logs) holds after the step beside its
/// static part, the received pipeline inputs with their gradients (policies/pipeline_inputs.h).
void add_pipeline_inputs_note(const Prepared& p, const Layout& o, TrainingEstimate& e) {
  const int64_t last = o.parallel.pp - 1;
  const PipelineInputsKept k = pipeline_inputs_kept(p.workload, o, p.model.hidden, last);
  if (k.total() == 0) return;
  const bool sp = o.parallel.sp && o.parallel.tp > 1;
  e.notes.push_back(fmt::format(
      "after the step, stage {} of {} (the last rank, which Megatron logs) holds beside its static part the last "
      "micro-batch's received input of each of its {} model chunk(s) with its gradient: 2·chunks·{}·b·h·e = 2 × {} × {} B = {} B (Megatron's TransformerBlock "
      "keeps it as input_tensor, backward_step's retain_grad its .grad; schedules.py); in "
      "memory.by_stage[].after_step_bytes, what torch.cuda.memory_allocated() reads after the step, not in "
      "the peak, where each chunk's newest input is still in flight",
      last + 1, o.parallel.pp, k.chunks, sp ? (o.parallel.cp > 1 ? "s/(cp·tp)" : "s/tp") : (o.parallel.cp > 1 ? "s/cp" : "s"),
      k.chunks, group_digits(k.tensor_bytes), group_digits(k.total())));
}

void add_grad_copies_note(const Prepared& p, const RecordingSink& rec, TrainingEstimate& e) {
  if (rec.stages.empty() || rec.stages.back().grad_copies_kept == 0) return;
  e.notes.push_back(fmt::format(
      "after the step, the last stage also holds fp32 copies of its {} gradients: {} B per parameter the optimizer "
      "holds = {} B (Megatron's optimizer sets main_param.grad = main_grad.float(), a copy of a 16-bit buffer, "
      "until the next step's zero_grad; optimizer.py); in memory.by_stage[].after_step_bytes, not in the peak",
      dtype_name(p.workload.grad_dtype), grad_copy_bytes_after_step(p.workload),
      group_digits(rec.stages.back().grad_copies_kept)));
}

}  // namespace actmem::detail
