#include "policies/grad_copies.h"

#include "util/dtype.h"

namespace actmem {

int grad_copy_bytes_after_step(const Workload& w) {
  const bool master_fp32 = w.precision == Precision::kMixed && w.weight_dtype != DType::kFP32;
  const bool buffer_16bit = w.grad_dtype == DType::kFP16 || w.grad_dtype == DType::kBF16;
  return w.framework == Framework::kMegatron && master_fp32 && buffer_16bit ? 4 : 0;
}

}  // namespace actmem
