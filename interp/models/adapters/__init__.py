"""Architecture adapters, one per family. `adapter_for(hf_model)` picks by config.model_type."""

from __future__ import annotations

from interp.errors import UnsupportedModelError
from interp.models.adapters.base import Adapter
from interp.models.adapters.bert import BertAdapter
from interp.models.adapters.gemma2 import Gemma2Adapter
from interp.models.adapters.gemma3 import Gemma3Adapter
from interp.models.adapters.gpt2 import GPT2Adapter
from interp.models.adapters.gpt_neox import GPTNeoXAdapter
from interp.models.adapters.llama import LlamaAdapter
from interp.models.adapters.mistral import MistralAdapter
from interp.models.adapters.olmo2 import Olmo2Adapter
from interp.models.adapters.qwen2 import Qwen2Adapter

ADAPTERS: tuple[type[Adapter], ...] = (
    LlamaAdapter,
    Qwen2Adapter,
    MistralAdapter,
    Gemma2Adapter,
    Gemma3Adapter,
    Olmo2Adapter,
    GPT2Adapter,
    GPTNeoXAdapter,
    BertAdapter,
)
_BY_TYPE = {t: a for a in ADAPTERS for t in a.model_types}


def supported_model_types() -> list[str]:
    return sorted(_BY_TYPE)


def adapter_class(model_type: str) -> type[Adapter]:
    try:
        return _BY_TYPE[model_type]
    except KeyError:
        raise UnsupportedModelError(
            f"architecture model_type={model_type!r} is not supported; supported: {', '.join(supported_model_types())}"
        ) from None


def adapter_for(hf) -> Adapter:
    return adapter_class(hf.config.model_type)(hf)


__all__ = ["Adapter", "ADAPTERS", "adapter_for", "adapter_class", "supported_model_types"]
