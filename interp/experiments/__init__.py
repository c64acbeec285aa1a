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

from interp import package_face

_EXPORTS = {
    "Comparison": "comparison",
    "ConditionStats": "comparison",
    "compare": "comparison",
    "Condition": "conditions",
    "Controls": "conditions",
    "baseline": "conditions",
    "head_ablation": "conditions",
    "random_head_controls": "conditions",
    "WriteNorms": "heads",
    "control_write_strength": "heads",
    "write_norms": "heads",
    "mean_head_outputs": "means",
    "reference_means": "means",
    "Outcomes": "runner",
    "run_conditions": "runner",
    "NiahOutcome": "tasks",
    "NiahTask": "tasks",
    "PromptItem": "tasks",
    "PromptTask": "tasks",
    "RepeatedTask": "tasks",
    "Task": "tasks",
    "read_prompts": "tasks",
    "run_niah": "tasks",
    "text_items": "tasks",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
