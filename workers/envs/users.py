"""Simulated end users and annotators: feedback derived from the program's check, with noise."""

import random
from dataclasses import dataclass

from workers.envs.weather import Outcome, Task, reference_answer


@dataclass(frozen=True)
class Feedback:
    thumbs_up: bool
    correction: str | None  # what the agent should have said, when the user bothers to write it


@dataclass(frozen=True)
class SimulatedUser:
    """Says thumbs up when the episode succeeded, with probability `noise` of the opposite; after a
    failure writes a correction with probability `correction_rate`."""

    noise: float = 0.1
    correction_rate: float = 0.3

    def react(self, task: Task, outcome: Outcome, rng: random.Random) -> Feedback:
        thumbs_up = outcome.success != (rng.random() < self.noise)
        correction = (
            reference_answer(task) if not outcome.success and rng.random() < self.correction_rate else None
        )
        return Feedback(thumbs_up=thumbs_up, correction=correction)


@dataclass(frozen=True)
class SimulatedAnnotator:
    """Labels a share of episodes on a 0–1 scale: 1 for success, 0.5 for the right tool call with a wrong
    answer, 0 otherwise; mistaken with probability `noise`."""

    share: float = 0.2
    noise: float = 0.05

    def wants(self, rng: random.Random) -> bool:
        return rng.random() < self.share

    def label(self, outcome: Outcome, rng: random.Random) -> float:
        score = 1.0 if outcome.success else 0.5 if outcome.right_city else 0.0
        if rng.random() < self.noise:
            score = rng.choice([value for value in (0.0, 0.5, 1.0) if value != score])
        return score
