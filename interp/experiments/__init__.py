"""Causal experiments: tasks x conditions x metrics, one runner and one comparison step.

```
task (prompts + spans + scoring)  x  conditions (name + interventions; baseline, target, controls)
  -> run_conditions (batches; each distinct condition once)  -> Outcomes (per-sample metric arrays)
  -> compare (mean CI; paired diff vs baseline with CI, sign-flip p, d_z; pools; direct tests)
```
Analyses (ablation, rope_zero, induction) are short functions on top of this (the engine knows none of
them); so is a notebook:

    from interp import experiments as ex
    task = ex.NiahTask.build(model.tokenizer, NiahConfig(context_lengths=(512,)))
    heads = [HeadId(3, 1), HeadId(2, 0)]  # or interp.analyses.heads.resolve_heads("retrieval", model).heads
    ctl = ex.random_head_controls(heads, model.spec, lambda hs: (AblateHeads(hs),), draws=3)
    out = ex.run_conditions(model, task, [ex.baseline(), ex.head_ablation("target", heads, role="target"),
                                          *ctl.conditions])
    table = ex.compare(out, pools={"random": ctl.names}, direct=[("target", "random")]).to_frame()
"""

from interp.experiments.compare import Comparison, ConditionStats, compare
from interp.experiments.conditions import Condition, Controls, baseline, head_ablation, random_head_controls
from interp.experiments.heads import WriteNorms, control_write_strength, write_norms
from interp.experiments.means import mean_head_outputs, reference_means
from interp.experiments.runner import Outcomes, run_conditions
from interp.experiments.tasks import (NiahOutcome, NiahTask, PromptItem, PromptTask, RepeatedTask, Task, read_prompts, run_niah,
                    text_items)

__all__ = ["Comparison", "Condition", "ConditionStats", "Controls", "NiahOutcome", "NiahTask",
           "Outcomes", "PromptItem", "PromptTask", "RepeatedTask", "Task", "WriteNorms", "baseline", "compare",
           "control_write_strength", "head_ablation", "mean_head_outputs", "random_head_controls", "read_prompts",
           "reference_means", "run_conditions", "run_niah", "text_items", "write_norms"]
