"""reforge.export_causal_lm on real `transformers` models (needs torch and transformers: skipped
without them, as in the project's own environment; the GPU machine and any PyTorch user's
environment have them): a Llama with grouped-query heads and a GPT-2, exported and generated from,
give the tokens of the model's own greedy `generate`, alone and as a left-padded batch."""

import numpy as np
import pytest

import reforge

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def models():
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=80, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=80, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2))
    for m in (llama, gpt2):
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for _, p in sorted(m.named_parameters()):
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
    return {"llama": llama.eval(), "gpt2": gpt2.eval()}


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_exported_model_generates_the_models_tokens(tmp_path, name):
    model = models()[name]
    path = reforge.export_causal_lm(model, tmp_path / "model.onnx")
    plan = reforge.build(path, threads=1)
    prompts = [[3, 17, 42, 8, 11, 60], [25, 9, 70]]
    got = plan.generate(prompts, max_new_tokens=12)
    for row, prompt in zip(got, prompts):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                                  pad_token_id=0, eos_token_id=None)[0, len(prompt):].numpy()
        assert row.tolist() == want.tolist()
