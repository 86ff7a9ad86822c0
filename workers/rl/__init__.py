"""RL compute for training: advantages, losses, proximal log-probabilities, off-policy token filtering,
training samples from ATDP and sequence packing. Django-free; see README.md."""
