"""A stand-in for the few transformers 5 calls measure_hf.py makes, for its CPU self-test only
(test_compare_results.py puts this folder first on PYTHONPATH; nothing else imports it).

AutoConfig.for_model(model_type, **config) and AutoModelForCausalLM.from_config(config,
attn_implementation=, experts_implementation=, dtype=) build validation/models.py's reference model
of a llama or mixtral config.json (hf style, transformers 5 experts) inside a wrapper shaped like
an HF model: `.model.layers` (the layers whose forward-pre-hooks mark the regions), `.config`
with `_attn_implementation` / `_experts_implementation`, `gradient_checkpointing_enable(
gradient_checkpointing_kwargs={"use_reentrant": ...})`, `is_gradient_checkpointing`, and a forward
returning an object with `.loss`. It lets the script's HF path (build, hooks, time guard, results
file) run without transformers; it measures nothing transformers does.
"""
import types

import torch

import models

__version__ = "stand-in"
_ATTN = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash"}


class AutoConfig:
    @classmethod
    def for_model(cls, model_type, **kwargs):
        if model_type not in ("llama", "mixtral"):
            raise ValueError(f"the stand-in knows llama and mixtral, not {model_type}")
        return types.SimpleNamespace(model_type=model_type, **kwargs)


class _Wrapper(torch.nn.Module):
    def __init__(self, config, attn, experts):
        super().__init__()
        self.config = config
        config._attn_implementation, config._experts_implementation = attn, experts
        cfg = models.ModelConfig(
            family=config.model_type, hidden=config.hidden_size, layers=config.num_hidden_layers,
            heads=config.num_attention_heads, kv_heads=config.num_key_value_heads, head_dim=config.head_dim,
            ffn=config.intermediate_size, vocab=config.vocab_size, eps=config.rms_norm_eps,
            tie_embeddings=config.tie_word_embeddings, experts=getattr(config, "num_local_experts", 0),
            top_k=getattr(config, "num_experts_per_tok", 0),
        )  # fmt: skip
        self.run = models.RunConfig("hf", _ATTN[attn], "none", "bf16", 0, 0, hf_version="5",
                                    experts_impl=experts or "grouped_mm")  # fmt: skip
        self.model = models.build(cfg, self.run)
        self.is_gradient_checkpointing = False

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        reentrant = (gradient_checkpointing_kwargs or {}).get("use_reentrant", False)
        self.run.recompute, self.run.checkpoint = "full", "reentrant" if reentrant else "non-reentrant"
        self.is_gradient_checkpointing = True

    def forward(self, input_ids, labels):
        return types.SimpleNamespace(loss=self.model(input_ids, labels))


class AutoModelForCausalLM:
    @classmethod
    def from_config(cls, config, attn_implementation="sdpa", experts_implementation=None, dtype=None):
        model = _Wrapper(config, attn_implementation, experts_implementation)
        return model.to(dtype) if dtype is not None else model


AutoModelForMaskedLM = AutoModelForSequenceClassification = AutoModelForCausalLM
