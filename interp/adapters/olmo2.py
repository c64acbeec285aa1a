"""OLMo-2: RMSNorm over the full q and k projections (QK-norm) before RoPE.

The attention interface receives post-norm, post-RoPE q/k, so every q/k intervention acts after
the norm, as it must.
"""

from .base import Adapter


class Olmo2Adapter(Adapter):
    model_types = ("olmo2",)
    family = "olmo2"

    def qk_norm(self):
        return True
