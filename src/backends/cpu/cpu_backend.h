// The CPU backend: the host. Its kernels use oneDNN, OpenBLAS and reforge's own vectorized code;
// every op it has no kernel for runs the op's reference kernel (ops/), since its tensors are the
// host's. Each file of this folder holds the CPU kernels of the op it is named after and
// registers them through one of the functions below; cpu_backend.cc collects them.
#pragma once

#include "backends/backend.h"

namespace reforge::cpu {

using backends::KernelRegistry;

// The backend descriptor that backends/backend.cc registers as "cpu".
backends::Backend backend();

void register_arithmetic_kernels(KernelRegistry& r);           // arithmetic.cc: Add, Sub, Mul, Div, Pow
void register_matmul_kernels(KernelRegistry& r);               // matmul.cc: MatMul
void register_gemm_kernels(KernelRegistry& r);                 // gemm.cc: Gemm
void register_conv_kernels(KernelRegistry& r);                 // conv.cc: Conv, reforge::FusedConv
void register_conv_transpose_kernels(KernelRegistry& r);       // conv_transpose.cc: ConvTranspose
void register_max_pool_kernels(KernelRegistry& r);             // max_pool.cc: reforge::MaxPool
void register_softmax_kernels(KernelRegistry& r);              // softmax.cc: Softmax, LogSoftmax
void register_layer_normalization_kernels(KernelRegistry& r);  // layer_normalization.cc
void register_gelu_kernels(KernelRegistry& r);                 // gelu.cc: reforge::Gelu
void register_matmul_add_kernels(KernelRegistry& r);           // matmul_add.cc: MatMulAdd(Packed), PackPanels
void register_matmul_quant_kernels(KernelRegistry& r);         // matmul_quant.cc: MatMulQuant, MatMulNBits
void register_rms_norm_kernels(KernelRegistry& r);             // rms_norm.cc: reforge::RmsNorm
void register_silu_kernels(KernelRegistry& r);                 // silu.cc: reforge::Silu, reforge::SiluMul
void register_attention_kernels(KernelRegistry& r);            // attention.cc: reforge::Attention
void register_rotary_kernels(KernelRegistry& r);               // rotary.cc: reforge::Rotary
void register_unary_kernels(KernelRegistry& r);                // unary.cc: unary math, activations, Clip
void register_reduce_kernels(KernelRegistry& r);               // reduce.cc: ReduceMax/Min, ReduceLogSumExp, ArgMax/Min

}  // namespace reforge::cpu
