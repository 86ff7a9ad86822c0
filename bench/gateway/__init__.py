"""Gateway benchmark: an instant upstream, a load generator, the LiteLLM proxy as peer, and the runner
(`python -m bench.gateway.run`). See README.md beside this file."""
