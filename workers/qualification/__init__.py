"""Django-free qualification gates: plain facts about a trajectory in, a verdict with reason codes out."""
