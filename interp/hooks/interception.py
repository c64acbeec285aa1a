"""The one interception point for attention.

`install(hf, adapter)` registers, for the model's own attention implementation BASE (sdpa, eager,
flash_attention_2, flex_attention, ...), a wrapper named ``interp|BASE`` in transformers'
`AttentionInterface` (and BASE's mask builder under the same name in `AttentionMaskInterface`),
then switches the model to it. With no intervention active the wrapper calls BASE unchanged,
so sdpa/flash stay in use and logits are bit-identical to plain transformers.

Key windows (`restricts_keys`, keywindow.py): after the editors, every such intervention names the (row,
query head) pairs it restricts to S sink tokens and a window of W recent keys (`key_window`); the wrapper
puts them on the call (`call.windows`, which observers such as attention rows apply) and, after the base
attention, recomputes those pairs' outputs under their windows.

When interventions are active, the wrapper hands them, per layer and per call:
  q [batch, n_heads, q_len, head_dim]   (post-RoPE, post-QK-norm)
  k, v [batch, n_kv_heads, k_len, head_dim]  (after the KV-cache update: every cached key)
  out [batch, q_len, n_heads, head_dim]  (per-head output, i.e. the o_proj input)
Edits are out of place, so cached keys/values are never modified.

Recomputed heads (`recomputes_heads`, remap.py): right after the base attention (and the key windows), every
such intervention gets `recompute_out(call, q, k, v, out)` with the final q, k, v and returns `out` with the
outputs of its own (row, query head) pairs recomputed, e.g. against a private copy of their KV head's keys
(which under GQA the other query heads of the group must not see). Before every `edit_out`.

Order within one attention call: every active intervention's `edit_qkv` (editors, in the order
they became active), then every observer's `observe_qkv` on the final q, k, v, then
the base attention, then the key windows' and every `recompute_out`, then every `edit_out`, then every
`observe_out` on the final per-head output. So observers see the values after every edit, whatever the argument order or nesting of
`model.intervene(...)`.

Module-level sites (resid_pre, resid_post, attn_out, mlp_out) go through one torch hook per
(module, pre/post) while any intervention uses it (`SiteHook`, `InterceptState.add_site_hook`):
it runs the editors' functions in the order they were added, then the observers'.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from interp.hooks.keywindow import windowed_out

PREFIX = "interp|"


@dataclass
class AttnCall:
    """What an intervention sees of one attention call."""

    layer: int
    module: Any
    mask: torch.Tensor | None
    scaling: float
    softcap: float | None
    sliding_window: int | None
    batch_start: int  # index of this call's first row in the full batch (chunked forwards)
    q_len: int
    k_len: int
    pads: torch.Tensor | None = None  # [batch] first real (unpadded) token of each row, when the Model knows it
    windows: tuple = ()  # KeyWindow restrictions active in this call (keywindow.py): observers apply them too

    def local_rows(self, rows, batch_size: int) -> torch.Tensor | None:
        """Map global batch rows to indices in this call's batch; None means every row."""
        if rows is None:
            return None
        return select_rows(rows, self.batch_start, batch_size)[0]


def select_rows(rows, batch_start: int, batch_size: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch rows (a sequence or 1-D long tensor) that fall in the chunk
    [batch_start, batch_start + batch_size): (their indices in the chunk, their positions in `rows`),
    both long tensors, in the order of `rows`."""
    r = torch.as_tensor(rows, dtype=torch.long, device=device).reshape(-1)
    local = r - batch_start
    where = ((local >= 0) & (local < batch_size)).nonzero().reshape(-1)
    return local[where], where


def first_output(output):
    """The tensor a module outputs (its first element when it returns a tuple)."""
    return output[0] if isinstance(output, tuple) else output


def replace_first_output(output, new):
    if isinstance(output, tuple):
        return (new,) + tuple(output[1:])
    return new


@dataclass(eq=False)
class SiteHook:
    """One module-level site function of an intervention.

    when="pre": `fn` gets the module's input hidden states (first positional argument, else the
    `hidden_states` keyword); when="post": the module's output (its first element for tuples).
    `fn(tensor, batch_start)`: an editor (edits=True) returns the replacement tensor; an observer
    returns nothing. Editors always run before observers on the same module and side.
    """

    module: Any
    when: str
    fn: Callable
    edits: bool


class _SiteDispatch:
    """The one torch hook on (module, pre|post) while any SiteHook uses it."""

    def __init__(self, state: "InterceptState", module, when: str):
        self.state = state
        self.editors: list[SiteHook] = []
        self.observers: list[SiteHook] = []
        if when == "pre":
            self.handle = module.register_forward_pre_hook(self._pre, with_kwargs=True)
        elif when == "post":
            self.handle = module.register_forward_hook(self._post)
        else:
            raise ValueError(f"SiteHook.when must be 'pre' or 'post', got {when!r}")

    def _run(self, t):
        start = self.state.batch_start
        for h in self.editors:
            t = h.fn(t, start)
        for h in self.observers:
            h.fn(t, start)
        return t

    def _pre(self, module, args, kwargs):
        if args:
            new = self._run(args[0])
            return ((new,) + tuple(args[1:]), kwargs) if self.editors else None
        new = self._run(kwargs["hidden_states"])
        if not self.editors:
            return None
        kwargs = dict(kwargs)
        kwargs["hidden_states"] = new
        return args, kwargs

    def _post(self, module, args, output):
        new = self._run(first_output(output))
        return replace_first_output(output, new) if self.editors else None


class _SiteHookHandle:
    def __init__(self, state: "InterceptState", key, hook: SiteHook):
        self.state, self.key, self.hook = state, key, hook

    def remove(self) -> None:
        d = self.state.site_dispatch.get(self.key)
        if d is None:
            return
        for lst in (d.editors, d.observers):
            for i, h in enumerate(lst):
                if h is self.hook:
                    del lst[i]
                    break
        if not d.editors and not d.observers:
            d.handle.remove()
            del self.state.site_dispatch[self.key]


@dataclass
class InterceptState:
    """Per-model state read by the wrapper. `active` is the ordered list of live interventions;
    `site_dispatch` the module hooks in use, keyed by (id(module), "pre"|"post")."""

    spec: Any
    active: list = field(default_factory=list)
    batch_start: int = 0
    site_dispatch: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)  # per layer: attention calls the wrapper saw with interventions active
    skipped: list = field(default_factory=list)  # per layer: passes that skipped the layer on purpose (models.skip)
    pads: Any = None  # [batch] first real token of each row of the running forward (set by interp.Model)

    def __post_init__(self):
        self.calls = [0] * self.spec.n_layers
        self.skipped = [0] * self.spec.n_layers

    def add_site_hook(self, hook: SiteHook) -> _SiteHookHandle:
        """Add a module-level site function; returns a handle whose `remove()` takes it out again."""
        key = (id(hook.module), hook.when)
        d = self.site_dispatch.get(key)
        if d is None:
            d = self.site_dispatch[key] = _SiteDispatch(self, hook.module, hook.when)
        (d.editors if hook.edits else d.observers).append(hook)
        return _SiteHookHandle(self, key, hook)


def _base_function(module: Any, base: str) -> Callable:
    """The function BASE names; for eager, the model file's own eager_attention_forward."""
    if base == "eager":
        return sys.modules[type(module).__module__].eager_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS[base]


def _make_wrapper(base: str) -> Callable:
    def interp_attention(module, query, key, value, attention_mask, **kwargs):
        fn = _base_function(module, base)
        entry = _INSTALLED.get(module)
        if entry is None or not entry[0].active:
            return fn(module, query, key, value, attention_mask, **kwargs)
        state, layer = entry
        state.calls[layer] += 1
        call = AttnCall(
            layer=layer,
            module=module,
            mask=attention_mask,
            scaling=kwargs.get("scaling") if kwargs.get("scaling") is not None else query.shape[-1] ** -0.5,
            softcap=kwargs.get("softcap"),
            sliding_window=kwargs.get("sliding_window"),
            batch_start=state.batch_start,
            q_len=query.shape[2],
            k_len=key.shape[2],
            pads=state.pads,
        )
        active = tuple(state.active)
        # editors first, then observers, so observers always see the edited values
        for iv in active:
            if getattr(iv, "edits_qkv", False):
                query, key, value = iv.edit_qkv(call, query, key, value)
        windows = tuple(w for iv in active if getattr(iv, "restricts_keys", False)
                        for w in [iv.key_window(call, query.shape[0], query.device)] if w is not None)
        call.windows = windows
        for iv in active:
            if getattr(iv, "observes_qkv", False):
                iv.observe_qkv(call, query, key, value)
        out, weights = fn(module, query, key, value, attention_mask, **kwargs)
        if windows:
            out = windowed_out(call, query, key, value, out, windows)
            weights = None
        for iv in active:
            if getattr(iv, "recomputes_heads", False):
                out = iv.recompute_out(call, query, key, value, out)
                weights = None
        for iv in active:
            if getattr(iv, "edits_out", False):
                out = iv.edit_out(call, out)
        for iv in active:
            if getattr(iv, "observes_out", False):
                iv.observe_out(call, out)
        return out, weights

    interp_attention.__name__ = f"interp_attention_{base}"
    return interp_attention


def register(base: str) -> str:
    """Register the wrapper for BASE (idempotent) and return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    name = PREFIX + base
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, _make_wrapper(base))
    mask_fn = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping.get(base)
    if mask_fn is None and base == "eager":
        mask_fn = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping["eager"]
    if mask_fn is not None and name not in AttentionMaskInterface._global_mapping:
        AttentionMaskInterface.register(name, mask_fn)
    return name


def current_base(hf) -> str:
    impl = hf.config._attn_implementation or "eager"
    return impl[len(PREFIX):] if impl.startswith(PREFIX) else impl


# attention module -> (its model's InterceptState, layer index). Kept here, not as attributes on the
# HF modules: weak keys, so a model that is garbage-collected leaves nothing behind.
_INSTALLED: "weakref.WeakKeyDictionary[Any, tuple[InterceptState, int]]" = weakref.WeakKeyDictionary()


def install(hf, adapter, spec) -> InterceptState:
    """Route `hf`'s attention through the wrapper; register each attention module with its layer."""
    state = InterceptState(spec=spec)
    name = register(current_base(hf))
    _set_impl(hf, name)
    for i in range(spec.n_layers):
        _INSTALLED[adapter.attention(i)] = (state, i)
    return state


ATTENTION_FLAGS = ("edits_qkv", "edits_out", "restricts_keys", "recomputes_heads", "observes_qkv", "observes_out")


def acts_in_attention(iv) -> bool:
    """Whether an intervention works inside the attention wrapper (and so needs it to be called). An intervention
    still flagged with the old name `observes_qk` is refused (InterventionError) instead of never being called."""
    if getattr(iv, "observes_qk", False):
        from interp.errors import InterventionError

        raise InterventionError(f"{type(iv).__name__} sets `observes_qk`, whose name is now `observes_qkv` (and "
                                "`observe_qk` is `observe_qkv`, same arguments): rename both")
    return any(getattr(iv, f, False) for f in ATTENTION_FLAGS)


def uninstall(hf, adapter, spec) -> None:
    base = current_base(hf)
    _set_impl(hf, base)
    for i in range(spec.n_layers):
        _INSTALLED.pop(adapter.attention(i), None)


def _set_impl(hf, name: str) -> None:
    # set_attn_implementation validates names against its own list in some versions; setting the
    # config field is what every attention module reads at call time.
    for module in hf.modules():
        cfg = getattr(module, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            cfg._attn_implementation = name
    # a few models cache the name at init
    for module in hf.modules():
        if hasattr(module, "_attn_implementation") and not hasattr(module, "_interp_skip"):
            try:
                module._attn_implementation = name
            except (AttributeError, TypeError):
                pass
