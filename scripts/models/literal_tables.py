"""Writes tests/data/literal_tables/*.npy: tables a PyTorch exporter folds into constants, computed
by PyTorch itself, as independent references for src/builder/literal_proof (tests/literal_proof_test.cc).

Each table is made with the framework's own op sequence (float32 on the CPU), reimplemented here in
torch ops so that no `transformers` install is needed:
- rotary: HF LlamaRotaryEmbedding (_compute_default_rope_parameters + forward), with rope_type
  "linear" (inv_freq / factor) and the older LlamaLinearScalingRotaryEmbedding (positions / factor);
  GPT-J style half tables and the raw angle table; inv_freq as HF stores and expands it;
- sinusoidal position encodings: the PyTorch tutorial / Annotated Transformer formula, fairseq's
  concatenated sin|cos, and a numpy float64 implementation rounded to float32;
- aranges (integer-valued and float), masks (causal 0/-inf and finfo.min, tril 0/1, padding);
- negatives: random weights, a learned embedding's rows.

Run (any PyTorch >= 1.13, numpy): python3 scripts/models/literal_tables.py [OUT_DIR]
Seeded: a rerun writes the same files. The committed files were made with PyTorch 2.11.0 on the
CPU of the `run` device machine (this machine's Debian python has no torch), written to
$OUT and unpacked into tests/data/literal_tables.
"""
import math
import os
import sys

import numpy as np
import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../tests/data/literal_tables")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)


def save(name, t):
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t
    np.save(os.path.join(OUT, name + ".npy"), np.ascontiguousarray(a))


def llama_inv_freq(base, dim, factor=1.0, scale_inv_freq=True):
    # transformers.modeling_rope_utils._compute_default_rope_parameters
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    if factor != 1.0 and scale_inv_freq:
        inv_freq = inv_freq / factor  # _compute_linear_scaling_rope_parameters: inv_freq /= factor
    return inv_freq


def llama_cos_sin(base, dim, start, seq, factor=1.0, scale_inv_freq=True):
    # LlamaRotaryEmbedding.forward, batch 1
    inv_freq = llama_inv_freq(base, dim, factor, scale_inv_freq)
    position_ids = torch.arange(start, start + seq, dtype=torch.int64)[None, :]
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    if factor != 1.0 and not scale_inv_freq:  # LlamaLinearScalingRotaryEmbedding (transformers 4.3x)
        position_ids_expanded = position_ids_expanded / factor
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    attention_scaling = 1.0
    return emb.cos() * attention_scaling, emb.sin() * attention_scaling, freqs


for base, dim, start, seq, factor, scale_inv in [
    (10000, 16, 0, 16, 1.0, True),
    (500000, 32, 0, 32, 1.0, True),
    (1000000, 128, 0, 64, 1.0, True),
    (10000, 80, 0, 24, 1.0, True),
    (10000, 64, 0, 48, 2.0, True),
    (10000, 64, 0, 48, 3.0, False),
    (10000, 16, 5, 16, 1.0, True),
    (12345, 16, 0, 16, 1.0, True),
]:
    cos, sin, freqs = llama_cos_sin(base, dim, start, seq, factor, scale_inv)
    tag = f"b{base}_d{dim}_p{start}_s{seq}_f{factor:g}{'' if scale_inv else 'pos'}"
    save(f"rope_cos_{tag}", cos)  # [1, S, D], as HF returns it
    save(f"rope_sin_{tag}", sin)
    save(f"rope_inv_freq_{tag}", llama_inv_freq(base, dim, factor, scale_inv))

cos, sin, freqs = llama_cos_sin(10000, 16, 0, 16)
save("rope_cos_b10000_d16_sd", cos[0])                       # [S, D]
save("rope_cos_b10000_d16_11sd", cos[None])                  # [1, 1, S, D] (unsqueeze for heads)
save("rope_inv_freq_b10000_d16_expanded", llama_inv_freq(10000, 16)[None, :, None])  # [1, D/2, 1]
save("rope_freqs_b10000_d16", freqs[0])                      # [S, D/2] raw angles
save("rope_half_cos_b10000_d16", freqs[0].cos())             # [S, D/2] (GPT-J sincos before interleave)
save("rope_half_sin_b10000_d16", freqs[0].sin())
save("rope_gptj_sin_b10000_d16", torch.repeat_interleave(freqs[0].sin(), 2, dim=-1))  # [S, D]
save("rope_cos_b10000_d16_fp16", cos[0].to(torch.float16))
save("rope_cos_b10000_d64_s2048", llama_cos_sin(10000, 64, 0, 2048)[0][0, :, :])  # long positions

# Sinusoidal position encodings.
def pe_tutorial(max_len, d_model):  # PyTorch transformer tutorial / Annotated Transformer
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, 1, d_model)
    pe[:, 0, 0::2] = torch.sin(position * div_term)
    pe[:, 0, 1::2] = torch.cos(position * div_term)
    return pe[:, 0, :]


def pe_fairseq(num_embeddings, embedding_dim):  # fairseq SinusoidalPositionalEmbedding.get_embedding
    half_dim = embedding_dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    return torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)


def pe_numpy(n_position, d_hid):  # float64 numpy implementation, then float32
    table = np.array([[pos / np.power(10000, 2 * (j // 2) / d_hid) for j in range(d_hid)] for pos in range(n_position)])
    table[:, 0::2] = np.sin(table[:, 0::2])
    table[:, 1::2] = np.cos(table[:, 1::2])
    return torch.FloatTensor(table)


save("sinusoidal_tutorial_s50_d32", pe_tutorial(50, 32)[None])  # [1, S, D]
save("sinusoidal_tutorial_s16_d64", pe_tutorial(16, 64))
save("sinusoidal_fairseq_s20_d16", pe_fairseq(20, 16))
save("sinusoidal_numpy_s30_d16", pe_numpy(30, 16))

# Aranges.
save("arange_int_16", torch.arange(16).float())
save("arange_int_1x16", torch.arange(3, 3 + 2 * 16, 2).float()[None])
save("arange_int_rows_8x4", torch.arange(8).float()[:, None].expand(8, 4).contiguous())
save("arange_float_quarter", torch.arange(0.5, 8.0, 0.25))
save("arange_float_tenth", torch.arange(0, 3, 0.1))
save("arange_float_neg", torch.arange(1.0, -1.0, -0.07))

# Masks.
save("mask_causal_neginf_1x1x16x16", torch.triu(torch.full((16, 16), float("-inf")), diagonal=1)[None, None])
m = torch.full((8, 8), torch.finfo(torch.float32).min)
save("mask_causal_finfo_min_8x8", torch.triu(m, diagonal=1))
save("mask_tril_ones_16x16", torch.tril(torch.ones(16, 16)))
save("mask_causal_offset_4x12", torch.triu(torch.full((4, 12), float("-inf")), diagonal=9))  # past length 8
pad = torch.tensor([[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.float32)
save("mask_padding_2x1x1x8", ((1.0 - pad) * torch.finfo(torch.float32).min)[:, None, None, :])

# Negatives: must all be refused.
save("neg_randn_16x16", torch.randn(16, 16))
emb = torch.nn.Embedding(64, 16)
save("neg_embedding_rows_16x16", emb.weight[:16].detach())
save("neg_embedding_row", emb.weight[3].detach())
print("wrote", len(os.listdir(OUT)), "files to", OUT)
