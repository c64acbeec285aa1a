"""Tasks: seeded prompts with recorded spans (NIAH, repeated random tokens, ...)."""
