"""Small models whose weights are set by hand: a known previous-token head, induction head and
negative copy (copy-suppression) head, in a GPT-2 (learned positions, Conv1D) or a RoPE model.

Residual stream (d_model = 128), every component a unit vector:
  TOK[t]  dims 0..23   the current token (BOS has none)
  PREV[t] dims 24..47  the previous token, written by the previous-token head L0H0
  OUT[t]  dims 48..71  the prediction: the induction head L1H1 writes +OUT[next], the negative head
                       L2H2 writes -OUT[t] for the predicted token t it finds earlier in the context
  CONST 72, BOSF 73, POS 74..81 (GPT-2 only: 4 rotating position pairs)
The unembedding reads OUT only (W_U[t] = ALPHA * OUT[t]) and is not tied to the embedding.

Previous-token attention comes from a sum of rotations at frequencies F (RoPE pairs 0..3 with
rope_theta = 1e12; on GPT-2 the same rotations applied to POS), which peaks at distance 1.
Content matching (induction, negative head) uses head dims whose RoPE frequency is <= 1e-3,
so rotation barely touches them over the test contexts. Every other head has zero query (uniform
attention) and zero output; MLPs output zero. Token ids: 0 pad, 1 BOS, 2..23 content.
"""

from __future__ import annotations

import math

import torch

import interp

V = 24
D = 128
HD = 32
N_HEADS = 4
BOS = 1
CONTENT = tuple(range(2, V))
TOK, PREV, OUT, CONST, BOSF, POS = 0, 24, 48, 72, 73, 74
PREV_HEAD, IND_HEAD, NEG_HEAD = (0, 0), (1, 1), (2, 2)
THETA = 1e12
F = [THETA ** (-j / 16) for j in range(4)]  # RoPE pairs 0..3 of head_dim 32
STATIC = [d for j in range(4, 16) for d in (j, j + 16)]  # rotate_half pairs with frequency <= 1e-3
FALLBACK = STATIC[len(CONTENT)]  # query/key dim of the "no match: attend to BOS" fallback
ALPHA = 6.0  # unembedding scale


def _config(family: str):
    import transformers as tf

    if family == "gpt2":
        return tf.GPT2Config(vocab_size=V, n_embd=D, n_layer=3, n_head=N_HEADS, n_positions=128, n_inner=64,
                             tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                             bos_token_id=BOS, eos_token_id=BOS)
    common = dict(vocab_size=V, hidden_size=D, intermediate_size=64, num_hidden_layers=3, num_attention_heads=N_HEADS,
                  head_dim=HD, max_position_embeddings=128, tie_word_embeddings=False, rms_norm_eps=1e-6,
                  bos_token_id=BOS, eos_token_id=BOS, pad_token_id=0,
                  rope_parameters={"rope_type": "default", "rope_theta": THETA})
    if family == "llama":
        return tf.LlamaConfig(**common, num_key_value_heads=N_HEADS)
    if family == "qwen2":
        return tf.Qwen2Config(**common, num_key_value_heads=2)
    raise ValueError(family)


def _head_mats(family: str, n_kv: int):
    """Per-layer W_Q [H, HD, D], W_K, W_V [Hkv, HD, D], W_O [H, D, HD] of the planted circuit."""
    g = N_HEADS // n_kv
    mats = []
    for _ in range(3):
        mats.append({"q": torch.zeros(N_HEADS, HD, D), "k": torch.zeros(n_kv, HD, D),
                     "v": torch.zeros(n_kv, HD, D), "o": torch.zeros(N_HEADS, D, HD)})
    # --- L0H0: previous token. score(i, j) ~ sum_p cos(f_p (i - j - 1)) peaks at j = i - 1.
    a = 17.0
    (l, h), kv = PREV_HEAD, PREV_HEAD[1] // g
    for p, f in enumerate(F):
        if family == "gpt2":  # POS pair p holds (cos f i, sin f i) / 2; the query rotates it back by f
            c, s = math.cos(f), math.sin(f)
            x, y = POS + 2 * p, POS + 2 * p + 1
            mats[l]["k"][kv, p, x] = 2 * a
            mats[l]["k"][kv, p + 16, y] = 2 * a
            mats[l]["q"][h, p, x], mats[l]["q"][h, p, y] = 2 * a * c, 2 * a * s
            mats[l]["q"][h, p + 16, x], mats[l]["q"][h, p + 16, y] = -2 * a * s, 2 * a * c
        else:  # RoPE: q = a (cos f, -sin f), k = a (1, 0) on pair p -> q_i . k_j = a^2 cos(f (i - j - 1))
            mats[l]["k"][kv, p, CONST] = a
            mats[l]["q"][h, p, CONST] = a * math.cos(f)
            mats[l]["q"][h, p + 16, CONST] = -a * math.sin(f)
    _copy_ov(mats[l], h, kv, dst=PREV, gain=1.0)
    # --- L1H1: induction. query TOK[t] matches key PREV[t]; fallback CONST -> BOSF.
    (l, h), kv = IND_HEAD, IND_HEAD[1] // g
    _match_qk(mats[l], h, kv, q_src=TOK, k_src=PREV, scale=800.0, fallback=0.45)
    _copy_ov(mats[l], h, kv, dst=OUT, gain=3.0)
    # --- L2H2: negative copy. query OUT[t] (predicted token) matches key TOK[t]; writes -OUT[t].
    (l, h), kv = NEG_HEAD, NEG_HEAD[1] // g
    _match_qk(mats[l], h, kv, q_src=OUT, k_src=TOK, scale=600.0, fallback=0.45)
    _copy_ov(mats[l], h, kv, dst=OUT, gain=-1.0)
    return mats


def _match_qk(m, h, kv, q_src, k_src, scale, fallback):
    for i, t in enumerate(CONTENT):
        m["q"][h, STATIC[i], q_src + t] = math.sqrt(scale)
        m["k"][kv, STATIC[i], k_src + t] = math.sqrt(scale)
    m["q"][h, FALLBACK, CONST] = math.sqrt(scale)
    m["k"][kv, FALLBACK, BOSF] = math.sqrt(scale) * fallback


def _copy_ov(m, h, kv, dst, gain):
    for t in CONTENT:
        m["v"][kv, t, TOK + t] = 1.0
        m["o"][h, dst + t, t] = gain


def planted_hf(family: str = "llama"):
    """The HF model (float32, eval, sdpa) with the planted heads."""
    import transformers as tf

    config = _config(family)
    torch.manual_seed(0)
    hf = tf.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32).eval()
    n_kv = N_HEADS if family == "gpt2" else config.num_key_value_heads
    mats = _head_mats(family, n_kv)
    emb = torch.zeros(V, D)
    for t in range(V):
        if t != BOS:
            emb[t, TOK + t] = 1.0
    emb[BOS, BOSF] = 1.0
    emb[:, CONST] = 1.0
    unemb = torch.zeros(V, D)
    for t in range(V):
        unemb[t, OUT + t] = ALPHA
    norm_w = torch.full((D,), 1.0 / math.sqrt(D))
    with torch.no_grad():
        for p in hf.parameters():
            p.zero_()
        hf.lm_head.weight.copy_(unemb)
        if family == "gpt2":
            _fill_gpt2(hf, mats, emb, norm_w)
        else:
            _fill_llama(hf, mats, emb, norm_w)
    return hf


def _fill_llama(hf, mats, emb, norm_w):
    body = hf.model
    body.embed_tokens.weight.copy_(emb)
    body.norm.weight.copy_(norm_w)
    for layer, m in zip(body.layers, mats):
        layer.input_layernorm.weight.copy_(norm_w)
        layer.post_attention_layernorm.weight.copy_(norm_w)
        at = layer.self_attn
        at.q_proj.weight.copy_(m["q"].reshape(-1, D))
        at.k_proj.weight.copy_(m["k"].reshape(-1, D))
        at.v_proj.weight.copy_(m["v"].reshape(-1, D))
        at.o_proj.weight.copy_(m["o"].permute(1, 0, 2).reshape(D, -1))


def _fill_gpt2(hf, mats, emb, norm_w):
    body = hf.transformer
    body.wte.weight.copy_(emb)
    pos = torch.zeros(body.wpe.weight.shape)
    i = torch.arange(pos.shape[0], dtype=torch.float32)
    for p, f in enumerate(F):
        pos[:, POS + 2 * p] = torch.cos(f * i) / 2
        pos[:, POS + 2 * p + 1] = torch.sin(f * i) / 2
    body.wpe.weight.copy_(pos)
    body.ln_f.weight.copy_(norm_w)
    for block, m in zip(body.h, mats):
        block.ln_1.weight.copy_(norm_w)
        block.ln_2.weight.copy_(norm_w)
        w = torch.cat([m["q"].reshape(-1, D), m["k"].reshape(-1, D), m["v"].reshape(-1, D)], dim=0)  # [3D, D]
        block.attn.c_attn.weight.copy_(w.t())  # Conv1D: [in, out]
        block.attn.c_proj.weight.copy_(m["o"].permute(1, 0, 2).reshape(D, -1).t())


def planted_model(family: str = "llama") -> interp.Model:
    return interp.Model(planted_hf(family), name=f"planted-{family}")


def repeated_ids(n: int = 8, length: int = 10, seed: int = 0) -> torch.Tensor:
    """[n, 1 + 2 * length]: BOS, then `length` distinct content tokens, twice."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        r = torch.tensor(CONTENT)[torch.randperm(len(CONTENT), generator=g)[:length]]
        rows.append(torch.cat([torch.tensor([BOS]), r, r]))
    return torch.stack(rows)
