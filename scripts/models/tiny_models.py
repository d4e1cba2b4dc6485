"""Tiny Llama / GPT-2 / BERT / CNN models in plain PyTorch, their weight sets and inputs.

The same code runs on PyTorch 1.13 (TorchScript exporter) and PyTorch 2.x (dynamo exporter), so
it avoids anything newer than 1.13 (no F.scaled_dot_product_attention, no `transformers`).

Weight sets:
  A  "as initialized": norm weights all ones, biases all zero, so exporters merge equal
     initializers (the way a freshly initialized Hugging Face model looks).
  B  "fine-tuned": every tensor of A plus small seeded noise; no two tensors are equal.

Checkpoints are written as safetensors by hand (8-byte little-endian header length, JSON header,
raw little-endian data), so no safetensors package is needed on either interpreter.
"""

import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 128
HIDDEN = 64
LAYERS = 2
MAX_POSITIONS = 16  # learned position tables (gpt2, bert); inputs use at most 7 tokens


# ------------------------------------------------------------------------------------------------
# Llama-style decoder
# ------------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, rep):
    """x.repeat_interleave(rep, dim=1), written as Hugging Face's Llama does (expand + reshape).

    PyTorch 1.13 exports a dynamic-shape repeat_interleave as a Loop over sequence ops; real
    Llama exports contain this Expand/Reshape form instead.
    """
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)


class LlamaAttention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, mask):
        b, s = x.shape[0], x.shape[1]
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores + mask
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate):
        super().__init__()
        self.input_norm = RMSNorm(hidden)
        self.attn = LlamaAttention(hidden, heads, kv_heads)
        self.post_attn_norm = RMSNorm(hidden)
        self.mlp = LlamaMLP(hidden, intermediate)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_norm(x), cos, sin, mask)
        return x + self.mlp(self.post_attn_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, heads=4, kv_heads=2,
                 intermediate=80, rope_theta=10000.0):
        super().__init__()
        self.head_dim = hidden // heads
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            [LlamaLayer(hidden, heads, kv_heads, intermediate) for _ in range(layers)])
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        inv_freq = 1.0 / (rope_theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        # Not a weight: structural, like Hugging Face's (non-persistent) rotary buffer.
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, input_ids):
        seq = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        t = torch.arange(seq, dtype=torch.float32)
        freqs = t[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()[None, None, :, :]
        sin = emb.sin()[None, None, :, :]
        mask = torch.full((seq, seq), torch.finfo(torch.float32).min)
        mask = torch.triu(mask, diagonal=1)[None, None, :, :]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


# ------------------------------------------------------------------------------------------------
# GPT-2-style decoder
# ------------------------------------------------------------------------------------------------


class Conv1D(nn.Module):
    """GPT-2's Conv1D: a Linear whose weight is stored [in, out]."""

    def __init__(self, nx, nf):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.hidden = hidden
        self.c_attn = Conv1D(hidden, 3 * hidden)
        self.c_proj = Conv1D(hidden, hidden)

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        q, k, v = self.c_attn(x).split(self.hidden, dim=2)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        pos = torch.arange(s)
        causal = pos[None, :] <= pos[:, None]
        scores = scores.masked_fill(~causal, torch.finfo(torch.float32).min)
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.hidden)
        return self.c_proj(out)


class GPT2MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.c_fc = Conv1D(hidden, intermediate)
        self.c_proj = Conv1D(intermediate, hidden)

    def forward(self, x):
        return self.c_proj(gelu_tanh(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = GPT2Attention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = GPT2MLP(hidden, intermediate)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """lm_head is tied to wte (as in GPT-2): the checkpoint holds wte.weight once."""

    def __init__(self, vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, heads=4, intermediate=112,
                 max_positions=MAX_POSITIONS):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_positions, hidden)
        self.h = nn.ModuleList([GPT2Block(hidden, heads, intermediate) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, input_ids):
        position_ids = torch.arange(input_ids.shape[1], dtype=torch.int64)[None, :]
        x = self.wte(input_ids) + self.wpe(position_ids)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


# ------------------------------------------------------------------------------------------------
# BERT-style encoder
# ------------------------------------------------------------------------------------------------


class BertEmbeddings(nn.Module):
    def __init__(self, vocab, hidden, max_positions, type_vocab=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, input_ids):
        seq = input_ids.shape[1]
        position_ids = torch.arange(seq, dtype=torch.int64)[None, :]
        token_type_ids = torch.zeros_like(input_ids)  # Hugging Face's default when not given
        x = (self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
             + self.token_type_embeddings(token_type_ids))
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.hidden = hidden
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def split(self, x):
        b, s = x.shape[0], x.shape[1]
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, additive_mask):
        q = self.split(self.query(x))
        k = self.split(self.key(x))
        v = self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + additive_mask
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return out.view(out.shape[0], out.shape[1], self.hidden)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, additive_mask):
        x = self.attention_norm(x + self.attention_output(self.attention(x, additive_mask)))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self, vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, heads=4, intermediate=96,
                 max_positions=MAX_POSITIONS):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_positions)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, intermediate) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask):
        additive_mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * \
            torch.finfo(torch.float32).min
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x, additive_mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


# ------------------------------------------------------------------------------------------------
# CNN
# ------------------------------------------------------------------------------------------------


class ConvBN(nn.Module):
    def __init__(self, cin, cout, k, stride=1, bias=False):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=bias)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return self.bn(self.conv(x))


class ResidualBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = ConvBN(cin, cout, 3, stride)
        self.conv2 = ConvBN(cout, cout, 3)
        self.shortcut = ConvBN(cin, cout, 1, stride) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        return F.relu(self.conv2(F.relu(self.conv1(x))) + identity)


class CNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = ConvBN(3, 16, 3, bias=True)
        self.block1 = ResidualBlock(16, 16, 1)
        self.pool = nn.MaxPool2d(2)
        self.block2 = ResidualBlock(16, 32, 2)
        self.fc = nn.Linear(32, classes)

    def forward(self, pixel_values):
        x = F.relu(self.stem(pixel_values))
        x = self.pool(self.block1(x))
        x = self.block2(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


# ------------------------------------------------------------------------------------------------
# Specs: constructors, inputs, outputs, input sets
# ------------------------------------------------------------------------------------------------


def _ids(rng, batch, seq):
    return rng.randint(0, VOCAB, size=(batch, seq)).astype(np.int64)


def _llm_inputs(seed):
    rng = np.random.RandomState(seed)
    return {"b1_s7": {"input_ids": _ids(rng, 1, 7)}, "b2_s5": {"input_ids": _ids(rng, 2, 5)}}


def _bert_inputs(seed):
    rng = np.random.RandomState(seed)
    mask2 = np.ones((2, 5), np.int64)
    mask2[1, 3:] = 0  # second sequence padded: its last two tokens are masked out
    return {
        "b1_s7": {"input_ids": _ids(rng, 1, 7), "attention_mask": np.ones((1, 7), np.int64)},
        "b2_s5": {"input_ids": _ids(rng, 2, 5), "attention_mask": mask2},
    }


def _cnn_inputs(seed):
    rng = np.random.RandomState(seed)
    return {"b1": {"pixel_values": rng.randn(1, 3, 32, 32).astype(np.float32)},
            "b2": {"pixel_values": rng.randn(2, 3, 32, 32).astype(np.float32)}}


# dynamic_axes per input/output for the TorchScript exporter. The first input set is the one
# static exports are traced with; the second is the example for dynamic exports (batch 2 avoids
# any batch-1 specialisation in either exporter).
SPECS = {
    "llama": {
        "build": Llama, "seed": 1001, "inputs": ["input_ids"], "outputs": ["logits"],
        "input_sets": lambda: _llm_inputs(11),
        "dynamic_axes": {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
    },
    "gpt2": {
        "build": GPT2, "seed": 1002, "inputs": ["input_ids"], "outputs": ["logits"],
        "input_sets": lambda: _llm_inputs(12),
        "dynamic_axes": {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
    },
    "bert": {
        "build": Bert, "seed": 1003, "inputs": ["input_ids", "attention_mask"],
        "outputs": ["last_hidden_state", "pooler_output"],
        "input_sets": lambda: _bert_inputs(13),
        "dynamic_axes": {"input_ids": {0: "batch", 1: "seq"},
                         "attention_mask": {0: "batch", 1: "seq"},
                         "last_hidden_state": {0: "batch", 1: "seq"},
                         "pooler_output": {0: "batch"}},
    },
    "cnn": {
        "build": CNN, "seed": 1004, "inputs": ["pixel_values"], "outputs": ["logits"],
        "input_sets": lambda: _cnn_inputs(14),
        "dynamic_axes": {"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
    },
}
MODELS = list(SPECS)
WEIGHT_SETS = ["A", "B"]


# ------------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------------


def init_weights_a(model, seed):
    """Set A: seeded values; norm weights ones, biases zeros; BN running stats non-trivial."""
    g = torch.Generator().manual_seed(seed)

    def normal(t, std):
        with torch.no_grad():
            t.copy_(torch.randn(t.shape, generator=g) * std)

    for _, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            fan_in = m.weight[0].numel()
            normal(m.weight, 1.0 / math.sqrt(fan_in))
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, Conv1D):
            normal(m.weight, 1.0 / math.sqrt(m.weight.shape[0]))
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            normal(m.weight, 0.25)  # GPT-2 ties wte to lm_head: keeps its logits O(1)
        elif isinstance(m, (nn.LayerNorm, RMSNorm)):
            nn.init.ones_(m.weight)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.2)
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
                m.num_batches_tracked.fill_(0)


def perturb_b(model, seed):
    """Set B: every checkpoint tensor of A changed by small seeded noise."""
    g = torch.Generator().manual_seed(seed + 500)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if t.dtype == torch.int64:  # num_batches_tracked
                t.fill_(1000)
            elif name.endswith("running_var"):
                t.mul_(torch.exp(0.1 * torch.randn(t.shape, generator=g)))
            else:
                t.add_(0.05 * torch.randn(t.shape, generator=g))


def build_model(name, weights):
    spec = SPECS[name]
    torch.manual_seed(0)
    model = spec["build"]()
    init_weights_a(model, spec["seed"])
    if weights == "B":
        perturb_b(model, spec["seed"])
    elif weights != "A":
        raise ValueError("unknown weight set " + weights)
    return model.eval()


def load_model(name, checkpoint_path):
    model = SPECS[name]["build"]()
    state = read_safetensors(checkpoint_path)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
    return model.eval()


def run_reference(model, name, inputs):
    """Framework outputs (float32, eval mode) as a list in SPECS[name]["outputs"] order."""
    with torch.no_grad():
        out = model(*[torch.from_numpy(inputs[n].copy()) for n in SPECS[name]["inputs"]])
    if isinstance(out, torch.Tensor):
        out = (out,)
    return [o.detach().numpy().astype(np.float32) for o in out]


# ------------------------------------------------------------------------------------------------
# safetensors, written and read by hand
# ------------------------------------------------------------------------------------------------

_ST_DTYPES = {np.dtype("float32"): "F32", np.dtype("int64"): "I64", np.dtype("float16"): "F16",
              np.dtype("int32"): "I32"}
_ST_NP = {v: k for k, v in _ST_DTYPES.items()}


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> ndarray. Names in sorted order, data 8-byte aligned via header padding."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        data = a.tobytes()
        header[name] = {"dtype": _ST_DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(raw[base + b:base + e], dtype=_ST_NP[info["dtype"]]).reshape(
            info["shape"])
    return out


def state_dict_numpy(model):
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
