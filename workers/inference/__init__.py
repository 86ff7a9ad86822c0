"""Inference compute code (no Django): the default model, the embedded OpenAI-compatible server, and
the response parser shared with the vLLM tier. See README.md."""
