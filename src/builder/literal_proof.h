// Literal proofs: deciding, from a tensor's values alone, that it is a function of the model's
// configuration (structure) and not of its weights.
//
// Checkpoint binding calls prove_literal() for every float initializer that no checkpoint tensor
// matched. A tensor becomes a literal only when this returns a proof; everything else stays an
// unbound source (a refit that needs it is refused). There is no "looks like a table" verdict:
// a tensor is accepted either because its values have an exactly defined *structure*, or
// because a recognizer *recomputed* it from recovered configuration parameters (in float32,
// with the framework's operation order) and every element agrees within a stated bound.
// Never a tolerance on "closeness to something plausible"; never a learned weight.
//
// Structural (Kind::Structural, max_ulps = 0), checked on every float dtype:
//  (a) all-equal: every element has the same bit pattern, no NaN (an empty tensor counts);
//      e.g. the 2.0 of a Pow, an eps, a fill. (Note: an untrained weight that is all-equal,
//      e.g. zeros, is indistinguishable by value and is accepted; binding matches such tensors
//      against the checkpoint before asking here.)
//  (b) masks: exactly two distinct values {x, y}, either {0, 1} or {0, F} with F a negative
//      fill: -inf, the lowest finite value of float32, float16, bfloat16 or the tensor's own
//      dtype (torch.finfo(dtype).min), -1e4 or -1e9 (conventional fills), each as rounded
//      into the tensor's dtype. Zero is compared by value (+0 and -0 both count as 0:
//      `(1 - m) * finfo.min` writes -0 where m = 1).
//      View the tensor as [L, R, C] (L = product of leading axes, R = dim(-2), C = dim(-1);
//      rank 1 is [1, 1, C]). Every row must be a *step row*: p copies of a left value a,
//      then C - p copies of a right value b, with the same (a, b) for the whole tensor
//      (p in [0, C]). Then one of:
//      - causal: all L slices are identical, and p_i = clamp(i + k + 1, 0, C) for one integer
//        offset k, with 0 < p_i < C for some row (lower triangular incl. offset k when a is the
//        "keep" value, upper triangular when b is: triu(full(-inf), diagonal=k+1));
//      - padding along the last axis: within each slice all rows are identical (each slice
//        may have its own p: per-batch key lengths, left or right padding by the choice of
//        a/b);
//      - padding along axis -2: every row is constant (p_i in {0, C}), and within each slice
//        the rows are a run of a-rows then a run of b-rows (per-slice query lengths).
//  (c) integer aranges: exactly one axis varies; along it v[k] = start + k * step with
//      integer start and step != 0; every value is an integer of magnitude at most 2^m
//      (m = mantissa bits + 1: exact in the dtype); constant (bit-identical) along every
//      other axis. At least 2 elements along the axis.
//
// Proven (Kind::Proven) by recomputation, float32 tensors only (float16/bfloat16 tables are
// recomputed in float32 and rounded to the dtype, compared in that dtype's ulps). The bound is
// per element, in ulps of the tensor's dtype, of |value - reference|:
//  - Rotary (Llama / GPT-NeoX / HF LlamaRotaryEmbedding):
//      inv_freq[i] = 1 / (base ** (float(2i) / dim))            (PyTorch: int64 arange -> float,
//                                                                 true divide, pow, reciprocal)
//      linear scaling by factor f: either inv_freq / f (HF rope_type "linear") or
//                                  positions / f (older LlamaLinearScalingRotaryEmbedding)
//      angle[p, i] = float(p) * inv_freq[i]                       (one float32 product)
//      shapes: inv_freq [D/2] or [1, D/2, 1]; angle table [S, D/2]; cos/sin [S, D/2] (half),
//      [S, D] as cat(freqs, freqs) (Llama) or repeat_interleave (GPT-J), with leading 1s.
//      Parameters are recovered from the tensor: dim from the shape, base from the
//      frequencies (common bases tried exactly first: 10000, 500000, 1000000, ...; then the
//      recovered base rounded), f from inv_freq[0] = 1/f, the first position from column 0.
//  - Sinusoidal position encodings (Vaswani et al.), [S, D] or [1, S, D]:
//      interleaved pe[p, 2i] = sin(p * w_i), pe[p, 2i+1] = cos(p * w_i), or concatenated
//      [sin | cos]; w_i by the formulas in use: exp(2i * -(ln 10000 / D)) (PyTorch tutorial,
//      Annotated Transformer), 1 / 10000^(2i/D), exp(i * -(ln 10000 / (D/2 - 1))) (fairseq,
//      tensor2tensor), each in float32, or the whole table in float64 rounded once (numpy
//      implementations).
//  - Float aranges: v[k] = float32(start + k * step) computed in double as PyTorch's CPU
//      arange does, at least 3 elements, constant along the other axes; start and step are
//      the shortest decimals (up to 9 digits) that reproduce the values. A nonzero start below
//      half an ulp of the step is refused (no later element depends on it: a perturbed 0).
// Bounds (each a documented constant in literal_proof.cc):
//  - cos/sin outputs: 4 ulps of the result, with the angle reproduced bit-exactly (float32
//    product of the same operands). The float32 frequency each column uses may differ from
//    the correctly rounded formula by at most 2 ulps (pow/exp are not correctly rounded in
//    PyTorch's vectorized Sleef path, nor in glibc); the recognizer tries those 5 candidates
//    per column and records the largest offset used. The 4-ulp output bound covers libm
//    differences (Sleef u10 <= 1 ulp, glibc <= 1 ulp, SVML <= 4 ulp). No absolute floor: with
//    the angle reproduced exactly, accurate libms agree in ulps of the result even at zero
//    crossings, and a reference of exactly 0 (sin 0, angle 0) must be matched exactly. (A
//    floor tied to the angle, like 4 ulp(angle), would accept 16-ulp errors at angle 15.)
//  - inv_freq vectors and angle tables: 2 ulps. Float aranges: 2 ulps.
// A tensor in which one element differs by more than its bound is refused.
#pragma once

#include <optional>
#include <string>

#include "core/tensor.h"

namespace reforge::build {

struct LiteralProof {
  enum class Kind { Structural, Proven };
  Kind kind = Kind::Structural;
  // What was recognized, with its parameters: "all-equal (0.5)", "causal mask 0/-inf [1,1,16,16]",
  // "integer arange 0..15 step 1", "rotary cos table: base 10000, dim 16, positions 0..15,
  // linear scaling 1 (Llama cat layout)", "sinusoidal position encoding ...".
  std::string rule;
  // Proven only: the float32 formula and parameters the tensor was recomputed with.
  std::string recipe;
  // Proven only: largest |value - recomputation| over all elements, in ulps of the dtype.
  double max_ulps = 0;
};

// A proof that `t` is configuration-only, or nullopt (not provably so: an unbound source).
// Non-float tensors give nullopt (integer/bool tensors are literals by the binding's own rule).
// Never throws for any tensor contents; cost is O(numel) for the structural rules and a few
// passes of O(numel) for each recognizer whose cheap shape and value checks pass.
std::optional<LiteralProof> prove_literal(const Tensor& t);

// One line: "structural: causal mask 0/-inf [1,1,16,16]" or
// "proven: rotary cos table ... (recipe: ...; max 1 ulp)".
std::string describe(const LiteralProof& p);

}  // namespace reforge::build
