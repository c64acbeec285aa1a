"""Causal experiments: tasks x conditions x metrics, one runner and one comparison step.

```
task (prompts + spans + scoring)  x  conditions (name + interventions; baseline, target, controls)
  -> run_conditions (batches; each distinct condition once)  -> Outcomes (per-sample metric arrays)
  -> compare (mean CI; paired diff vs baseline with CI, sign-flip p, d_z; pools; direct tests)
```
Analyses (ablation, rope_zero, induction) are short functions on top of this; so is a notebook:

    from interp import experiments as ex
    task = ex.NiahTask.build(model.tokenizer, NiahConfig(context_lengths=(512,)))
    heads = ex.resolve_heads("retrieval", model).heads
    ctl = ex.random_head_controls(heads, model.spec, lambda hs: (AblateHeads(hs),), draws=3)
    out = ex.run_conditions(model, task, [ex.baseline(), ex.head_ablation("target", heads, role="target"),
                                          *ctl.conditions])
    table = ex.compare(out, pools={"random": ctl.names}, direct=[("target", "random")]).to_frame()
"""

from .compare import Comparison, ConditionStats, compare
from .conditions import Condition, Controls, baseline, head_ablation, random_head_controls
from .heads import HeadSelection, WriteNorms, control_write_strength, resolve_heads, write_norms
from .means import mean_head_outputs, reference_means
from .runner import Outcomes, run_conditions
from .tasks import (NiahOutcome, NiahTask, PromptItem, PromptTask, RepeatedTask, Task, read_prompts, run_niah,
                    text_items)

__all__ = ["Comparison", "Condition", "ConditionStats", "Controls", "HeadSelection", "NiahOutcome", "NiahTask",
           "Outcomes", "PromptItem", "PromptTask", "RepeatedTask", "Task", "WriteNorms", "baseline", "compare",
           "control_write_strength", "head_ablation", "mean_head_outputs", "random_head_controls", "read_prompts",
           "reference_means", "resolve_heads", "run_conditions", "run_niah", "text_items", "write_norms"]
