"""`interp.Model`: a transformers model with its tokenizer, adapter, spec and interception."""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Sequence

import torch

from interp.models.adapters import Adapter, adapter_for
from interp.errors import InterpError, InterventionError, InvalidInputError, UnsupportedModelError
from interp.hooks.interception import acts_in_attention, install, uninstall
from interp.models.spec import ModelSpec


@dataclass
class Batch:
    """Token ids and attention mask of a left-padded batch, on the model's device (from `Model.tokenize`,
    `Model.pad` or `Model.as_batch`). `position_ids`: positions counted over real tokens only;
    `lengths`: real tokens per row."""

    input_ids: torch.Tensor  # [batch, seq], left-padded
    attention_mask: torch.Tensor  # [batch, seq], 1 = real token

    @property
    def position_ids(self) -> torch.Tensor:
        return position_ids_from_mask(self.attention_mask)

    @property
    def lengths(self) -> torch.Tensor:
        return self.attention_mask.sum(-1)


def _is_nnsight(obj) -> bool:
    """Whether `obj` is an nnsight wrapper (an Envoy: NNsight, LanguageModel, TransformersModel, ...)."""
    mod = type(obj).__module__ or ""
    if mod.startswith("nnsight"):
        return True
    import sys

    nn_mod = sys.modules.get("nnsight")  # a wrapper object means nnsight is already imported
    envoy = getattr(nn_mod, "Envoy", None) if nn_mod is not None else None
    return isinstance(envoy, type) and isinstance(obj, envoy)  # subclasses defined outside nnsight too


def _unwrap(obj):
    """The torch model inside an nnsight wrapper (NNsight, LanguageModel, TransformersModel, ...); a
    TransformerLens bridge, or an HF model a bridge rewired, is refused (its attention never reaches
    interp's interception point): `interp.from_bridge(bridge)` is the way in."""
    if _is_nnsight(obj):
        if getattr(obj, "dispatched", True) is False and callable(getattr(obj, "dispatch", None)):
            obj.dispatch()  # built from a repo id without weights: load them (nnsight does this on first trace)
        inner = None
        for attr in ("_module", "_model"):  # nnsight >= 0.5 keeps the wrapped module in `_module`
            try:
                inner = object.__getattribute__(obj, attr)
            except AttributeError:
                continue
            if isinstance(inner, torch.nn.Module):
                break
            inner = None
        if inner is None:
            raise UnsupportedModelError(f"cannot find the torch model inside {type(obj).__name__}; pass the HF model")
        if not hasattr(inner, "config"):
            raise UnsupportedModelError(
                f"the {type(obj).__name__} wraps a {type(inner).__name__}, not a transformers model; wrap the whole "
                "HF model (e.g. nnsight.LanguageModel(hf_model)) or pass the HF model")
        if any(p.is_meta for p in inner.parameters()):
            raise UnsupportedModelError(
                f"the {type(obj).__name__}'s weights are on the meta device (not loaded); build it with "
                "dispatch=True or call .dispatch() first")
        return inner
    mod = type(obj).__module__ or ""
    if mod.startswith("transformer_lens"):
        raise UnsupportedModelError(
            f"interp.Model cannot run on a TransformerLens {type(obj).__name__}: it replaces the HF model's modules "
            "and attention implementation in place. Use interp.from_bridge(bridge) (same weights, "
            "a plain HF module tree), or load the checkpoint for interp separately (interp.load_model)")
    if isinstance(obj, torch.nn.Module) and any((type(m).__module__ or "").startswith("transformer_lens")
                                                for m in obj.modules()):
        raise UnsupportedModelError(
            f"this {type(obj).__name__} was rewired by a TransformerLens bridge (its submodules are TransformerLens "
            "components whose attention bypasses transformers' attention interface, so interp's interventions "
            "could not apply); pass the bridge to interp.from_bridge(bridge)")
    return obj


def _wrapper_tokenizer(obj):
    """The tokenizer an nnsight wrapper carries (None for anything else)."""
    if not _is_nnsight(obj):
        return None
    try:
        tok = object.__getattribute__(obj, "tokenizer")
    except AttributeError:
        return None
    if tok is None or not hasattr(tok, "pad_token"):
        return None
    if getattr(tok, "padding_side", "left") != "left":  # interp left-pads: leave the wrapper's own as it is
        import copy

        tok = copy.deepcopy(tok)
    return tok


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position of each token counted over real tokens only (left padding gets position 0)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def first_real(mask: torch.Tensor) -> torch.Tensor:
    """[batch] index of each left-padded row's first real token (0 for an unpadded row)."""
    return (mask.cumsum(-1) == 0).sum(-1)


def pad_left(seqs: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id sequences (lists, arrays or 1-D tensors) -> left-padded (ids, mask), both [n, max_len] long.

    The one padding helper of the package: every batch of prompts of different lengths is built here.
    """
    n = max((len(s) for s in seqs), default=0)
    ids = torch.full((len(seqs), n), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, n - len(s):] = torch.as_tensor(s, dtype=torch.long)
            mask[i, n - len(s):] = 1
    return ids, mask


class Model:
    """Holds `hf` (the transformers model), `tokenizer`, `spec` and the adapter.

    Attention is routed through interp's wrapper (see interception.py); with no intervention
    active it calls the model's own implementation unchanged.
    """

    def __init__(self, hf, tokenizer=None, name: str | None = None, source: str | None = None):
        if tokenizer is None:
            tokenizer = _wrapper_tokenizer(hf)  # an nnsight LanguageModel brings its tokenizer
        hf = _unwrap(hf)
        self.hf = hf.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(hf.config, "_name_or_path", "model")
        self.source = source or self.name
        self.adapter: Adapter = adapter_for(hf)
        self.spec: ModelSpec = self.adapter.spec()
        self._state = install(hf, self.adapter, self.spec)
        from interp.hooks.float_logits import install_float32_logits

        if not hasattr(hf, "_interp_float32_head"):  # once per transformers model (a second Model reuses it)
            hf._interp_float32_head = install_float32_logits(hf)
        self.dtype_choice = None  # interp.runtime.precision.DtypeChoice when load_model made it
        # the memory per device ({0: "20GiB", "cpu": "60GiB"}) batch_size="auto" plans within and a given batch
        # size is checked against (interp.models.batching); None: the free memory of the device, unchecked
        self.max_memory: dict | None = None
        self.device_map = None  # the device map it was loaded with (LoadOptions); auto batch sizes refuse one
        params = inspect.signature(hf.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._position_warned: set[int] = set()  # max_positions limits already warned about (check_positions)
        if tokenizer is not None:
            tokenizer.padding_side = "left"
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token

    def __repr__(self):
        s = self.spec
        return (f"Model({self.name!r}, {s.architecture}, layers={s.n_layers}, heads={s.n_heads}, "
                f"kv_heads={s.n_kv_heads}, head_dim={s.head_dim})")

    @property
    def float32_logits(self) -> bool:
        """Whether a bfloat16 / float16 model's logits are computed in float32 from its final hidden state (True,
        the default: interp.hooks.float_logits); False gives the model's own low-precision logits."""
        head = self.hf.get_output_embeddings() if hasattr(self.hf, "get_output_embeddings") else None
        return head is not None and getattr(head, "_interp_float32_logits", True)

    @float32_logits.setter
    def float32_logits(self, enabled: bool) -> None:
        from interp.hooks.float_logits import set_float32_logits

        set_float32_logits(self.hf, enabled)

    @property
    def device(self) -> torch.device:
        return next(self.hf.parameters()).device

    def detach(self) -> None:
        """Restore the model's original attention implementation (undo `install`). Interventions then
        refuse to run (they could not reach the attention); `attach()` routes it through interp again."""
        uninstall(self.hf, self.adapter, self.spec)
        self._detached = True

    def attach(self) -> None:
        """Route attention through interp's wrapper again after `detach()`."""
        if getattr(self, "_detached", False):
            self._state = install(self.hf, self.adapter, self.spec)
            self._detached = False

    # ---- interventions -----------------------------------------------------------------
    @contextlib.contextmanager
    def intervene(self, *interventions):
        """Apply interventions for the body of the `with`; all are removed on exit, also on error.

        Editors (ablations, RoPE zeroing, patches) act in the order they became active (argument
        order, outer contexts first); observers (captures, recorders) always see the values after
        every edit, whatever the argument order or nesting.
        """
        for iv in interventions:
            if not hasattr(iv, "bind"):
                raise InvalidInputError(f"{iv!r} is not an interp intervention")
        if interventions and getattr(self, "_detached", False):
            raise InterventionError("this Model was detached (model.detach()): interventions would not reach its "
                                    "attention; call model.attach() first")
        for iv in interventions:
            iv.bind(self)
        handles = []
        added = []
        attention_level = [type(iv).__name__ for iv in interventions if acts_in_attention(iv)]
        body_calls = [0]
        calls0 = [c + s for c, s in zip(self._state.calls, self._state.skipped)]
        if attention_level:  # count forward passes, to check that the attention wrapper saw them
            handles.append(self.adapter.body().register_forward_pre_hook(
                lambda *a: body_calls.__setitem__(0, body_calls[0] + 1)))
        try:
            for iv in interventions:
                handles.extend(iv.hooks(self))
                site_hooks = getattr(iv, "site_hooks", None)
                for sh in (site_hooks(self) if site_hooks is not None else ()):
                    handles.append(self._state.add_site_hook(sh))
                self._state.active.append(iv)
                added.append(iv)
            yield self
            if body_calls[0]:
                calls1 = [c + s for c, s in zip(self._state.calls, self._state.skipped)]
                missed = [l for l, (a, b) in enumerate(zip(calls0, calls1)) if a == b]
                if missed:
                    raise InterventionError(
                        f"{', '.join(attention_level)} did not apply: {body_calls[0]} forward pass(es) ran but the "
                        f"attention of layer(s) {missed} never went through interp's interception point. Something "
                        "changed the model's attention implementation after interp.Model was built (e.g. a "
                        "TransformerLens bridge or another wrapper on the same HF model, or "
                        "set_attn_implementation); build interp.Model on a model nothing else wraps")
        finally:
            for h in reversed(handles):
                h.remove()
            for iv in added:
                self._state.active.remove(iv)

    def _check_rows(self, n: int) -> None:
        """Refuse interventions aimed at batch rows the batch does not have (they would do nothing)."""
        for iv in self._state.active:
            rows = getattr(iv, "rows", None)
            if rows and max(rows) >= n:
                raise InvalidInputError(f"{type(iv).__name__} targets batch row {max(rows)}, but the batch has {n} "
                                        f"rows (0..{n - 1})")

    # ---- tokenisation and forward ------------------------------------------------------
    def tokenize(self, texts: str | Sequence[str], add_special_tokens: bool = True) -> Batch:
        """Tokenize one text or a list of texts into a left-padded Batch on the model's device.
        Raises InterpError when the model has no tokenizer."""
        if self.tokenizer is None:
            raise InterpError(f"{self.name} has no tokenizer: pass token ids instead of text")
        if isinstance(texts, str):
            texts = [texts]
        enc = self.tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=add_special_tokens)
        return Batch(enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device))

    def pad(self, seqs: Sequence[Sequence[int]]) -> Batch:
        """Left-padded Batch of token-id sequences on the model's device (pad id from the tokenizer, else 0)."""
        tok = self.tokenizer
        pad_id = tok.pad_token_id if tok is not None and tok.pad_token_id is not None else 0
        ids, mask = pad_left(seqs, pad_id)
        return Batch(ids.to(self.device), mask.to(self.device))

    def as_batch(self, inputs, attention_mask=None) -> Batch:
        """A Batch from `inputs`: a Batch (returned as is), a text or list of texts (tokenized), or token ids
        [seq] or [batch, seq] (mask default: all ones). Raises InvalidInputError for non-integer ids, ids
        outside the vocabulary or a mask of another shape."""
        if isinstance(inputs, Batch):
            return inputs
        if isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], str)):
            return self.tokenize(inputs)
        ids = torch.as_tensor(inputs)
        if ids.ndim == 1:
            ids = ids.unsqueeze(0)
        if ids.dtype not in (torch.long, torch.int32, torch.int64):
            raise InvalidInputError(f"token ids must be integers, got {ids.dtype}")
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.spec.d_vocab):
            raise InvalidInputError(f"token ids must lie in 0..{self.spec.d_vocab - 1}")
        if attention_mask is None:
            attention_mask = torch.ones_like(ids)
        attention_mask = torch.as_tensor(attention_mask)
        if attention_mask.shape != ids.shape:
            raise InvalidInputError(f"attention_mask shape {tuple(attention_mask.shape)} != ids shape {tuple(ids.shape)}")
        return Batch(ids.to(self.device), attention_mask.to(self.device))

    def check_positions(self, n_tokens: int) -> None:
        """Refuse inputs past a model's learned absolute positions (GPT-2: no embedding there, torch would
        fail deep inside); warn once (InterpWarning) past a RoPE model's max_position_embeddings."""
        limit = self.spec.max_positions
        if limit is None or n_tokens <= limit:
            return
        if self.spec.positional == "learned":
            raise InvalidInputError(f"{self.spec.architecture} has learned positions for {limit} tokens; an input of "
                                    f"{n_tokens} tokens (prompt + decoded tokens) goes past them: use shorter inputs")
        if limit not in self._position_warned:
            import warnings

            from interp.errors import InterpWarning

            self._position_warned.add(limit)
            warnings.warn(InterpWarning(f"inputs of {n_tokens} tokens are past {self.name}'s max_position_embeddings "
                                        f"{limit}: the model was not trained there"), stacklevel=3)

    def _call(self, ids, mask, batch_start=0, body_only=False, **kw):
        self.check_positions(ids.shape[1])
        self._state.batch_start = batch_start
        self._state.pads = first_real(mask)
        net = self.hf.base_model if body_only else self.hf
        try:
            return net(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), **kw)
        finally:
            self._state.batch_start = 0
            self._state.pads = None

    def forward(self, inputs, attention_mask=None, batch_size: int | None = None, logits: bool = True,
                last_only: bool = False, grad: bool = False) -> torch.Tensor:
        """Logits [batch, seq, vocab] (or last hidden states for encoders), batched with left padding.

        logits=False runs only the transformer body and returns its last hidden states (no
        [batch, seq, vocab] tensor: what hooks and recorders need when the logits are not).
        last_only=True returns the logits of the last position only, [batch, 1, vocab] (the LM head
        runs on that position alone: transformers' `logits_to_keep=1`, final softcaps included).
        grad=True keeps the autograd graph (attribution patching); by default no graph is built.
        """
        with torch.set_grad_enabled(grad):
            return self._forward(inputs, attention_mask, batch_size, logits, last_only)

    def _forward(self, inputs, attention_mask, batch_size, logits, last_only) -> torch.Tensor:
        batch = self.as_batch(inputs, attention_mask)
        n = batch.input_ids.shape[0]
        self._check_rows(n)
        bs = batch_size or n
        if bs < 1:
            raise InvalidInputError("batch_size must be >= 1")
        outs = []
        for start in range(0, n, bs):
            ids = batch.input_ids[start:start + bs]
            mask = batch.attention_mask[start:start + bs]
            kw = {"logits_to_keep": 1} if last_only and logits and self.spec.causal else {}
            out = self._call(ids, mask, batch_start=start, body_only=not logits, **kw)
            x = out.logits if hasattr(out, "logits") else out.last_hidden_state
            outs.append(x[:, -1:] if last_only else x)
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)

    @torch.no_grad()
    def forward_cached(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache,
                       last_only: bool = True) -> torch.Tensor:
        """Continue from a KV cache of the first `cache.get_seq_length()` tokens: `input_ids` [b, s] are
        the following tokens, `attention_mask` [b, prefix + s] covers both. Logits of the new tokens
        ([b, 1, vocab] with last_only). Interventions active around the call see only the new tokens."""
        if not self.spec.causal:
            raise InvalidInputError(f"{self.spec.architecture} is an encoder; it has no KV cache")
        self._check_rows(input_ids.shape[0])
        self.check_positions(attention_mask.shape[1])
        pos = position_ids_from_mask(attention_mask)[:, -input_ids.shape[1]:]
        kw = {"logits_to_keep": 1} if last_only else {}
        self._state.batch_start = 0
        self._state.pads = first_real(attention_mask)
        try:
            out = self.hf(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos, use_cache=True,
                          **{self._cache_kw: cache}, **kw)
        finally:
            self._state.pads = None
        return out.logits[:, -1:] if last_only else out.logits

    @torch.no_grad()
    def greedy_decode(self, inputs, max_new_tokens: int, attention_mask=None, on_step=None,
                      decode_interventions: Sequence = ()) -> torch.Tensor:
        """Greedy continuation with a KV cache: prefill, then one token per step. Returns [batch, new].

        `on_step(step, new_tokens)` is called after each token is chosen (step 0 = from the prefill).
        Interventions active around the call apply to prefill and every decode step;
        `decode_interventions` apply to the decode steps only (the prefill, which also yields the
        first new token, runs without them), as in the original retrieval-head masking.
        """
        if max_new_tokens < 1:
            raise InvalidInputError("max_new_tokens must be >= 1")
        if not self.spec.causal:
            raise InvalidInputError(f"{self.spec.architecture} is an encoder; it cannot decode")
        from transformers import DynamicCache

        batch = self.as_batch(inputs, attention_mask)
        self._check_rows(batch.input_ids.shape[0])
        mask = batch.attention_mask
        self.check_positions(mask.shape[1] + max_new_tokens - 1)  # the last chosen token is never fed back
        # A full (non-sliding) cache: rows keep absolute key positions on sliding-window layers;
        # the sliding window is applied by the mask, as in a full forward.
        cache = DynamicCache()
        # the prefill's logits of the last position only: [batch, T, vocab] would be 10 GB at 32k tokens of a
        # 150k-token vocabulary in bf16, and decoding reads only the last row
        out = self._call(batch.input_ids, mask, use_cache=True, logits_to_keep=1, **{self._cache_kw: cache})
        tokens = []
        with self.intervene(*decode_interventions):
            for step in range(max_new_tokens):
                nxt = out.logits[:, -1].argmax(-1)
                tokens.append(nxt)
                if on_step is not None:
                    on_step(step, nxt)
                if step == max_new_tokens - 1:
                    break
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                pos = position_ids_from_mask(mask)[:, -1:]
                self._state.batch_start = 0
                self._state.pads = first_real(mask)
                try:
                    out = self.hf(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True,
                                  **{self._cache_kw: cache})
                finally:
                    self._state.pads = None
        return torch.stack(tokens, dim=1)
