"""Per-step rewards: the reward each interaction (llm_call) of a trajectory trains with. Pure.

AReaL lets an agent reward single interactions (`/rl/set_reward {interaction_id, reward}`) or the last one,
and keeps those rewards per interaction: each interaction is a training sample with its own reward. Its
optional backpropagation walks the interactions from the last to the first, an interaction without a reward
counting 0, and adds the discounted return of the next one: G_i = r_i + γ·G_(i+1) (`turn_discount`, 1.0 by
default, in its `apply_reward_discount`). Ours:

- default (`discount=None`): a step trains with its own reward; a step without one trains with the
  trajectory's reward (the one number `apps.rewards.selectors.training_reward` gives the whole trajectory).
  With a single reward, or none on any step, every step gets the trajectory's reward: training is what it
  was before rewards were kept per step.
- `discount=γ` in (0, 1]: AReaL's backpropagation, G_i = r_i + γ·G_(i+1), where r_i is the step's own reward,
  0 for a step without one, except the last step: without its own reward it takes `outcome` (the rewards that
  name the whole trajectory, combined; an evaluator's, a session-level reward), or 0 when there is none.
  Without any reward at all every step's is None (untrainable), as in the default.
"""

from collections.abc import Sequence


def step_rewards(
    own: Sequence[float | None],
    *,
    trajectory: float | None,
    outcome: float | None = None,
    discount: float | None = None,
) -> tuple[float | None, ...]:
    """The training reward of each step, in step order. `own[i]`: step i's own reward (None: it has none);
    `trajectory`: the trajectory's reward; `outcome`: the trajectory-level rewards only (discount mode)."""
    if discount is None:
        return tuple(trajectory if value is None else float(value) for value in own)
    if not 0.0 < discount <= 1.0:
        raise ValueError("the reward discount must be in (0, 1]")
    if not own:
        return ()
    if all(value is None for value in own) and outcome is None:
        return tuple(None for _ in own)
    returns: list[float] = []
    running = 0.0
    last = len(own) - 1
    for index in range(last, -1, -1):
        value = own[index]
        if value is None:
            value = (outcome or 0.0) if index == last else 0.0
        running = float(value) + discount * running
        returns.append(running)
    return tuple(reversed(returns))


def runs_of_equal_rewards(rewards: Sequence[float | None]) -> list[tuple[int, int]]:
    """(first, last) index pairs of the maximal runs of consecutive equal rewards: a merged sample is split
    where the reward changes, so that each piece trains with one reward."""
    runs: list[tuple[int, int]] = []
    for index, value in enumerate(rewards):
        if runs and rewards[runs[-1][1]] == value:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs
