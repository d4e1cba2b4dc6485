// The reduce family: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, TopK, CumSum/CumProd, Einsum, Det,
// DFT/STFT and the losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).
//
// Each file of the family exposes one registration function; they are declared here rather than
// in a header because nothing else calls them.
#include "ops/registry.h"

namespace reforge::ops {

void register_reduce_kernels(OpRegistry& r);   // reduce.cc
void register_arg_kernels(OpRegistry& r);      // reduce_arg.cc
void register_softmax_kernels(OpRegistry& r);  // softmax.cc
void register_topk_kernels(OpRegistry& r);     // topk.cc
void register_cumsum_kernels(OpRegistry& r);   // cumsum.cc
void register_einsum_kernels(OpRegistry& r);   // einsum.cc
void register_loss_kernels(OpRegistry& r);     // loss.cc
void register_det_kernels(OpRegistry& r);      // det.cc
void register_dft_kernels(OpRegistry& r);      // dft.cc: DFT, STFT

void register_reduce_ops(OpRegistry& r) {
  register_reduce_kernels(r);
  register_arg_kernels(r);
  register_softmax_kernels(r);
  register_topk_kernels(r);
  register_cumsum_kernels(r);
  register_einsum_kernels(r);
  register_loss_kernels(r);
  register_det_kernels(r);
  register_dft_kernels(r);
}

}  // namespace reforge::ops
