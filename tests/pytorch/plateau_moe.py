"""The model of docs/ARCHITECTURE.md section 8 in PyTorch (eager, any dtype).

An independent second implementation: the parity test compares Plateau's
loss and gradients with it, and the throughput benchmark uses it as the
PyTorch baseline. Parameter names are the checkpoint contract's, so
safetensors files move between the two. With rounding=bf16_rounding it
rounds where Plateau's precision: bf16 does (section 8: the products'
inputs, attention's q, k, v and output, the experts' pre-activations,
hidden layer and outputs, the layer boundaries, the logits), in whatever
dtype it runs.
"""

import json
import math
import struct

import torch
import torch.nn.functional as F


class Config:
    def __init__(self, layers, d_model, heads, experts, top_k, ffn_hidden,
                 vocab, seq_len, rms_epsilon=1e-5,
                 load_balancing_coefficient=0.01, rope_theta=10000.0,
                 kv_heads=None, z_loss_coefficient=0.0, qk_norm=False,
                 expert_bias=False, router="softmax", shared_experts=0,
                 shared_ffn_hidden=None, tie_embeddings=False):
        self.layers = layers
        self.d_model = d_model
        self.heads = heads
        # Grouped-query attention: query head i attends with key and value
        # head i // (heads // kv_heads).
        self.kv_heads = heads if kv_heads is None else kv_heads
        # The router z-loss: coefficient x mean over tokens of
        # logsumexp(router logits)^2.
        self.z_loss_coefficient = z_loss_coefficient
        # QK-norm: each head of q and k RMS-normalised and scaled by a
        # learned weight of head_dim (one for q, one for k) before rotary.
        self.qk_norm = qk_norm
        # Aux-loss-free balancing: a per-expert bias added to the
        # probabilities for the choice of experts only (not trained).
        self.expert_bias = expert_bias
        # "softmax", or "sigmoid": each expert's sigmoid chooses, and the
        # sigmoids normalised over the experts are the probabilities.
        self.router = router
        # Shared experts: SwiGLU experts every token passes through, stored
        # as one SwiGLU of shared_experts * shared_ffn_hidden units.
        self.shared_experts = shared_experts
        self.shared_ffn_hidden = (ffn_hidden if shared_ffn_hidden is None
                                  else shared_ffn_hidden)
        # Tied embeddings: the head projects onto embed.weight; there is
        # no lm_head.weight.
        self.tie_embeddings = tie_embeddings
        self.experts = experts
        self.top_k = top_k
        self.ffn_hidden = ffn_hidden
        self.vocab = vocab
        self.seq_len = seq_len
        self.rms_epsilon = rms_epsilon
        self.load_balancing_coefficient = load_balancing_coefficient
        self.rope_theta = rope_theta


def parameter_shapes(c):
    """Names and shapes in the order of Plateau's ParameterLayout."""
    d, e, f = c.d_model, c.experts, c.ffn_hidden
    kv = c.kv_heads * (d // c.heads)
    shapes = [("embed.weight", (c.vocab, d))]
    for i in range(c.layers):
        p = f"layers.{i}."
        shapes += [
            (p + "attn_norm.weight", (d,)),
            (p + "attn.wq.weight", (d, d)),
            (p + "attn.wk.weight", (kv, d)),
            (p + "attn.wv.weight", (kv, d)),
            (p + "attn.wo.weight", (d, d)),
        ]
        if c.qk_norm:
            shapes += [(p + "attn.q_norm.weight", (d // c.heads,)),
                       (p + "attn.k_norm.weight", (d // c.heads,))]
        shapes += [
            (p + "moe_norm.weight", (d,)),
            (p + "moe.router.weight", (e, d)),
        ]
        if c.expert_bias:
            shapes += [(p + "moe.router.expert_bias", (e,))]
        if c.shared_experts > 0:
            h = c.shared_experts * c.shared_ffn_hidden
            shapes += [(p + "moe.shared_experts.w1", (h, d)),
                       (p + "moe.shared_experts.w3", (h, d)),
                       (p + "moe.shared_experts.w2", (d, h))]
        shapes += [
            (p + "moe.experts.w1", (e, f, d)),
            (p + "moe.experts.w3", (e, f, d)),
            (p + "moe.experts.w2", (e, d, f)),
        ]
    shapes += [("final_norm.weight", (d,))]
    if not c.tie_embeddings:
        shapes += [("lm_head.weight", (c.vocab, d))]
    return shapes


def random_parameters(c, generator, dtype=torch.float32, scale=0.3):
    params = {}
    for name, shape in parameter_shapes(c):
        if len(shape) == 1 and not name.endswith("expert_bias"):
            value = 1.0 + scale * torch.randn(shape, generator=generator)
        else:
            value = scale * torch.randn(shape, generator=generator)
        params[name] = value.to(dtype)
    return params


def keep(x):
    """No rounding: the model in its own dtype."""
    return x


def bf16_rounding(x):
    """x rounded to bf16 (to nearest even), returned in x's dtype."""
    return x.to(torch.float32).to(torch.bfloat16).to(x.dtype)


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotary(x, seq_len, theta):
    """Rotate-half rotary embedding of base theta; x: (B, H, T, hd)."""
    head_dim = x.shape[-1]
    half = head_dim // 2
    position = torch.arange(seq_len, dtype=torch.float64)
    frequency = theta ** (-2.0 * torch.arange(half, dtype=torch.float64)
                          / head_dim)
    angle = position[:, None] * frequency[None, :]
    cos = torch.cos(angle).to(x.dtype)
    sin = torch.sin(angle).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(x, p, prefix, c, rounding=keep):
    b, t, d = x.shape
    h, hd = c.heads, d // c.heads
    x = rounding(x)

    def heads(w, count):
        return (x @ rounding(p[prefix + w]).T).view(b, t, count,
                                                    hd).transpose(1, 2)

    def shared(kv):
        # Each key and value head, once per query head of its group.
        return kv.repeat_interleave(h // c.kv_heads, dim=1)

    q, k = heads("attn.wq.weight", h), heads("attn.wk.weight", c.kv_heads)
    if c.qk_norm:
        q = rms_norm(q, p[prefix + "attn.q_norm.weight"], c.rms_epsilon)
        k = rms_norm(k, p[prefix + "attn.k_norm.weight"], c.rms_epsilon)
    q = rounding(rotary(q, t, c.rope_theta))
    k = shared(rounding(rotary(k, t, c.rope_theta)))
    v = shared(rounding(heads("attn.wv.weight", c.kv_heads)))
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    context = torch.softmax(scores, dim=-1) @ v
    context = rounding(context.transpose(1, 2).reshape(b, t, d))
    return context @ rounding(p[prefix + "attn.wo.weight"]).T


def moe(x, p, prefix, c, rounding=keep):
    """Returns (output, load-balancing loss); x: (N, d). The router reads
    x unrounded."""
    n = x.shape[0]
    logits = x @ p[prefix + "moe.router.weight"].T
    if c.router == "sigmoid":
        scores = torch.sigmoid(logits)
        probs = scores / scores.sum(-1, keepdim=True)
    else:
        probs = scores = torch.softmax(logits, dim=-1)
    # Plateau breaks ties toward the lower index; random weights never tie.
    # The scores choose (with the expert bias of aux-loss-free balancing,
    # which only chooses); the chosen probabilities make the gates.
    choice = scores.detach()
    if c.expert_bias:
        choice = choice + p[prefix + "moe.router.expert_bias"].detach()
    _, top_experts = torch.topk(choice, c.top_k, dim=-1, sorted=True)
    top_probs = probs.gather(-1, top_experts)
    gates = top_probs / top_probs.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    w1, w3, w2 = (rounding(p[prefix + "moe.experts." + w])
                  for w in ("w1", "w3", "w2"))
    counts = torch.zeros(c.experts, dtype=x.dtype)
    for e in range(c.experts):
        token, slot = torch.nonzero(top_experts == e, as_tuple=True)
        counts[e] = token.numel()
        if token.numel() == 0:
            continue
        rows = rounding(x[token])
        hidden = rounding(F.silu(rounding(rows @ w1[e].T)) *
                          rounding(rows @ w3[e].T))
        expert_out = gates[token, slot, None] * rounding(hidden @ w2[e].T)
        # Under autocast the products are bf16; the sum stays in x's dtype.
        out.index_add_(0, token, expert_out.to(out.dtype))
    fraction = counts / (n * c.top_k)
    aux = (c.load_balancing_coefficient * c.experts
           * (fraction * probs.mean(0)).sum())
    return out, aux


def shared_experts(x, p, prefix, c, rounding=keep):
    """The shared experts' output for a layer's normed input x: (N, d),
    each expert on its own and summed. Plateau keeps their pre-activations
    in float32 (they are made again in backward, not stored), so only the
    products' inputs round."""
    out = torch.zeros_like(x)
    f = c.shared_ffn_hidden
    w1, w3, w2 = (rounding(p[prefix + "moe.shared_experts." + w])
                  for w in ("w1", "w3", "w2"))
    rows = rounding(x)
    for j in range(c.shared_experts):
        units = slice(j * f, (j + 1) * f)
        hidden = F.silu(rows @ w1[units].T) * (rows @ w3[units].T)
        out = out + (rounding(hidden) @ w2[:, units].T).to(out.dtype)
    return out


def z_loss(x, p, prefix, c):
    """The router z-loss of a layer's normed input x: (N, d)."""
    logits = x @ p[prefix + "moe.router.weight"].T
    return c.z_loss_coefficient * torch.logsumexp(logits, -1).pow(2).mean()


def loss(p, tokens, c, moe_block=moe, rounding=keep):
    """Mean cross-entropy, total load-balancing loss and total router
    z-loss (zero without a coefficient).

    tokens: (sequences, seq_len + 1) int64; moe_block: moe, or another
    implementation of it (the throughput benchmark's batched one).
    """
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    b, t = inputs.shape
    x = rounding(p["embed.weight"][inputs])
    aux_total = torch.zeros((), dtype=x.dtype)
    z_total = torch.zeros((), dtype=x.dtype)
    for i in range(c.layers):
        prefix = f"layers.{i}."
        x = x + attention(rms_norm(x, p[prefix + "attn_norm.weight"],
                                   c.rms_epsilon), p, prefix, c, rounding)
        flat = x.reshape(b * t, -1)
        normed = rms_norm(flat, p[prefix + "moe_norm.weight"], c.rms_epsilon)
        out, aux = moe_block(normed, p, prefix, c, rounding)
        if c.shared_experts > 0:
            out = out + shared_experts(normed, p, prefix, c, rounding)
        # The layer's float32 sum, rounded once: the next one's input.
        x = rounding(x + out.view(b, t, -1))
        aux_total = aux_total + aux
        if c.z_loss_coefficient > 0:
            z_total = z_total + z_loss(normed, p, prefix, c)
    x = rounding(rms_norm(x, p["final_norm.weight"], c.rms_epsilon))
    head = p["embed.weight" if c.tie_embeddings else "lm_head.weight"]
    logits = rounding(x @ rounding(head).T)
    ce = F.cross_entropy(logits.reshape(b * t, -1), targets.reshape(-1))
    return ce, aux_total, z_total


# Safetensors' names of the dtypes these files hold.
SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16}


def write_safetensors(path, tensors):
    """tensors: name -> tensor, written in insertion order, bfloat16 ones
    as BF16 and every other as F32."""
    header, blobs, offset = {}, [], 0
    for name, tensor in tensors.items():
        tensor = tensor.detach().contiguous()
        if tensor.dtype == torch.bfloat16:
            dtype, data = "BF16", tensor.view(torch.int16).numpy().tobytes()
        else:
            dtype, data = "F32", tensor.to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(text)))
        file.write(text)
        for blob in blobs:
            file.write(blob)


def read_safetensors(path):
    """name -> tensor in the file's dtype (F32 or BF16)."""
    with open(path, "rb") as file:
        length = struct.unpack("<Q", file.read(8))[0]
        header = json.loads(file.read(length))
        data = file.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[begin:end]),
                                         dtype=dtype).reshape(entry["shape"])
    return tensors
