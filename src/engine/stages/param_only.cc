// --params N: a parameter count alone gives static memory (param_only_counts(): all parameters
// TP-splittable, spread over pp equal pseudo-layers); the peak GPU is the stage with the most
// static bytes. Its explanation is static memory's (report.cc describe).
#include "engine/stages/account.h"

namespace actmem::detail {

void account_param_only(const Prepared& p, const Layout& l, Totals& t, RecordingSink* rec) {
  const ParallelLayout& par = l.parallel;
  const Workload& w = p.workload;
  Bytes best{-1};
  for (int64_t stage = 0; stage < par.pp; ++stage) {
    StageParams st;
    st.stage = stage;
    st.first_layer = stage;
    st.num_layers = 1;
    st.dense = ceil_div(p.param_count / par.pp + (stage < p.param_count % par.pp ? 1 : 0), par.tp);
    const int z = w.framework == Framework::kTorchtitan ? 3 : l.zero_stage;  // FSDP2 (fsdp2.h)
    const StageStatic bytes = stage_static_bytes(st, p.per_param, z, l.offload_optimizer, par);
    if (bytes.total() > best) {
      best = bytes.total();
      t.peak_stage = stage;
      t.params_on_gpu = st.total();
      t.weights = bytes.weights.count();
      t.gradients = bytes.gradients.count();
      t.optimizer = bytes.optimizer.count();
      t.cpu_optimizer = bytes.cpu_optimizer.count();
      if (rec) rec->stage = st;
    }
  }
  t.reserve = l.reserve.count();
  t.workspaces = p.workspaces.total();
  t.total = (Bytes{t.weights} + Bytes{t.gradients} + Bytes{t.optimizer} + Bytes{t.workspaces} + l.reserve).count();
}

}  // namespace actmem::detail
