"""MixtralForCausalLM as the Hugging Face layout defines it, in PyTorch.

Written from the public definition of transformers' Mixtral model
(modeling_mixtral.py: MixtralRMSNorm, MixtralRotaryEmbedding with
rotate_half, MixtralAttention with repeat_kv, MixtralSparseMoeBlock,
MixtralBlockSparseTop2MLP) and its config keys, not from Plateau's code:
it reads a directory as transformers would (config.json,
model.safetensors.index.json and its shards) and computes the causal
language-model loss in any dtype. transformers itself is not installable
here; this is the independent reader the export is checked against.
"""

import json
import math
import os

import torch
import torch.nn.functional as F

import plateau_moe


def load(directory, dtype=torch.float64):
    """(config dict, state dict) of a model directory: shards and their
    index, or one model.safetensors."""
    with open(os.path.join(directory, "config.json")) as file:
        config = json.load(file)
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(index_path):
        tensors = plateau_moe.read_safetensors(
            os.path.join(directory, "model.safetensors"))
        return config, {name: value.to(dtype)
                        for name, value in tensors.items()}
    with open(index_path) as file:
        index = json.load(file)
    state = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors = plateau_moe.read_safetensors(os.path.join(directory, shard))
        for name, value in tensors.items():
            assert index["weight_map"][name] == shard, name
            state[name] = value.to(dtype)
    assert set(state) == set(index["weight_map"]), "index and shards differ"
    return config, state


def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary_cos_sin(config, seq_len, dtype):
    head_dim = config.get("head_dim") or (config["hidden_size"]
                                          // config["num_attention_heads"])
    inv_freq = 1.0 / (config["rope_theta"] ** (
        torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def repeat_kv(hidden, n_rep):
    batch, kv_heads, seq_len, head_dim = hidden.shape
    if n_rep == 1:
        return hidden
    hidden = hidden[:, :, None, :, :].expand(batch, kv_heads, n_rep, seq_len,
                                             head_dim)
    return hidden.reshape(batch, kv_heads * n_rep, seq_len, head_dim)


def attention(x, state, prefix, config, cos, sin):
    batch, seq_len, _ = x.shape
    heads = config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    q = (x @ state[prefix + "q_proj.weight"].T).view(
        batch, seq_len, heads, head_dim).transpose(1, 2)
    k = (x @ state[prefix + "k_proj.weight"].T).view(
        batch, seq_len, kv_heads, head_dim).transpose(1, 2)
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
    routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
    routing_weights = routing_weights.to(x.dtype)
    out = torch.zeros_like(x)
    for expert in range(config["num_local_experts"]):
        token, slot = torch.where(selected == expert)
        if token.numel() == 0:
            continue
        name = f"{prefix}experts.{expert}."
        rows = x[token]
        hidden_states = (F.silu(rows @ state[name + "w1.weight"].T)
                         * (rows @ state[name + "w3.weight"].T))
        expert_out = hidden_states @ state[name + "w2.weight"].T
        out.index_add_(0, token, expert_out * routing_weights[token, slot,
                                                              None])
    return out.view(batch, seq_len, hidden)


def causal_lm_loss(config, state, tokens):
    """Mean next-token cross-entropy of tokens: (batch, seq_len + 1)."""
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
            state, prefix + "block_sparse_moe.", config)
    x = rms_norm(x, state["model.norm.weight"], eps)
    head = state["model.embed_tokens.weight"
                 if config["tie_word_embeddings"] else "lm_head.weight"]
    logits = x @ head.T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           labels.reshape(-1))
