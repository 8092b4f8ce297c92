"""Qwen3MoeForCausalLM as the Hugging Face layout defines it, in PyTorch.

Written from the public definition of transformers' Qwen3-MoE model
(modeling_qwen3_moe.py: Qwen3MoeAttention, whose q_norm and k_norm are
RMSNorms of head_dim over each head of q and k before the rotary
embedding; Qwen3MoeSparseMoeBlock, softmax routing over num_experts whose
top num_experts_per_tok are renormalised when norm_topk_prob is set;
Qwen3MoeMLP's gate_proj, up_proj and down_proj) and its config keys, not
from Plateau's code. The parts it shares with Mixtral (RMSNorm, rotate-half,
repeat_kv, reading the directory) come from hf_mixtral.py.
"""

import math

import torch
import torch.nn.functional as F

from hf_mixtral import load, repeat_kv, rms_norm, rotary_cos_sin, rotate_half

__all__ = ["load", "causal_lm_loss"]


def attention(x, state, prefix, config, cos, sin):
    batch, seq_len, _ = x.shape
    heads = config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"]
    head_dim = config["head_dim"]
    eps = config["rms_norm_eps"]
    q = rms_norm((x @ state[prefix + "q_proj.weight"].T).view(
        batch, seq_len, heads, head_dim), state[prefix + "q_norm.weight"],
        eps).transpose(1, 2)
    k = rms_norm((x @ state[prefix + "k_proj.weight"].T).view(
        batch, seq_len, kv_heads, head_dim), state[prefix + "k_norm.weight"],
        eps).transpose(1, 2)
    v = (x @ state[prefix + "v_proj.weight"].T).view(
        batch, seq_len, kv_heads, head_dim).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = repeat_kv(k, heads // kv_heads)
    v = repeat_kv(v, heads // kv_heads)
    scores = (q @ k.transpose(2, 3)) / math.sqrt(head_dim)
    mask = torch.full((seq_len, seq_len), float("-inf"),
                      dtype=x.dtype).triu(1)
    weights = torch.softmax(scores + mask, dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(batch, seq_len, -1)
    return out @ state[prefix + "o_proj.weight"].T


def sparse_moe(x, state, prefix, config):
    batch, seq_len, hidden = x.shape
    x = x.view(-1, hidden)
    router_logits = x @ state[prefix + "gate.weight"].T
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float64)
    routing_weights, selected = torch.topk(routing_weights,
                                           config["num_experts_per_tok"],
                                           dim=-1)
    if config["norm_topk_prob"]:
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
    routing_weights = routing_weights.to(x.dtype)
    out = torch.zeros_like(x)
    for expert in range(config["num_experts"]):
        token, slot = torch.where(selected == expert)
        if token.numel() == 0:
            continue
        name = f"{prefix}experts.{expert}."
        rows = x[token]
        hidden_states = (F.silu(rows @ state[name + "gate_proj.weight"].T)
                         * (rows @ state[name + "up_proj.weight"].T))
        expert_out = hidden_states @ state[name + "down_proj.weight"].T
        out.index_add_(0, token, expert_out * routing_weights[token, slot,
                                                              None])
    return out.view(batch, seq_len, hidden)


def causal_lm_loss(config, state, tokens):
    """Mean next-token cross-entropy of tokens: (batch, seq_len + 1)."""
    assert config["decoder_sparse_step"] == 1 and not config["mlp_only_layers"]
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    x = state["model.embed_tokens.weight"][inputs]
    cos, sin = rotary_cos_sin(config, inputs.shape[1], x.dtype)
    eps = config["rms_norm_eps"]
    for i in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{i}."
        x = x + attention(
            rms_norm(x, state[prefix + "input_layernorm.weight"], eps),
            state, prefix + "self_attn.", config, cos, sin)
        x = x + sparse_moe(
            rms_norm(x, state[prefix + "post_attention_layernorm.weight"], eps),
            state, prefix + "mlp.", config)
    x = rms_norm(x, state["model.norm.weight"], eps)
    head = state["model.embed_tokens.weight"
                 if config["tie_word_embeddings"] else "lm_head.weight"]
    logits = x @ head.T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           labels.reshape(-1))
