"""LoadOptions: how a model is loaded, as one object (the CLI builds it once from --model, --device,
--model-dtype, --revision, --device-map and --max-memory, and passes it on whole)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoadOptions:
    """What `load_model` is given, and the memory budget a run plans within.

    `model`: an alias, checkpoint dir, .gguf file or Hub id; `device` / `dtype` / `revision` / `device_map` as in
    `load_model`; `max_memory` ({0: "20GiB", "cpu": "60GiB"}): with a device map accelerate's placement limits,
    and in every case the budget of `batch_size="auto"` (`Model.max_memory`, interp.models.batching)."""

    model: str
    device: str | None = None
    dtype: str | None = None
    revision: str | None = None
    device_map: str | None = None
    max_memory: dict | None = None

    def load(self):
        """The model (`interp.models.loading.load_model`), its `max_memory` set to this budget."""
        from interp.models.loading import load_model

        m = load_model(self.model, device=self.device, dtype=self.dtype, revision=self.revision,
                       device_map=self.device_map,
                       max_memory=self.max_memory if self.device_map is not None else None)
        m.max_memory, m.device_map = self.max_memory, self.device_map
        return m
