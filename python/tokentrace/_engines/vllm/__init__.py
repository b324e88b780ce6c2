"""vLLM: its worker's steps as tokens (steps.py), its engine core's steps and requests
(core.py), its front end's (front.py). Reached through the engines' face (_engines/), which
names no engine to its callers."""
