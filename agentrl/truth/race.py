"""A learning race where seeds are cheap: policy gradient on a generated MDP (tabular or
log-linear policy, ``loglinear.POLICY_KINDS``), J exact after every update.

Every estimator gets the same update rule: sample B tasks x G rollouts from the current policy,
turn the estimator's advantages into g_hat = sum_i A_hat_i dlog pi(a_i|s_i)/dtheta / rollouts,
and take one Adam step on the policy's parameters (Adam, as the trainer's AdamW, so that estimators whose
advantages are on another scale, e.g. RLOO's raw return differences, are not favoured or
penalised by the learning rate). A seed fixes the MDP instance, the initial logits and the
sampling stream, so estimators are compared paired by seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from agentrl_envs.mdp import MDPConfig, generate

from agentrl.credit import Batch
from agentrl.truth.exact import objective, optimal_objective
from agentrl.truth.loglinear import make_policy
from agentrl.truth.sample import sample_batch
from agentrl.truth.score import TRUTH_GAMMA, Contender, advantages, gradient_estimate, needs_fingerprint


@dataclass(frozen=True)
class RaceSettings:
    """The update rule and budget every estimator shares."""

    steps: int = 40
    """Policy updates per run."""
    B: int = 4
    """Tasks per batch."""
    G: int = 8
    """Rollouts per task."""
    lr: float = 0.1
    """Adam learning rate on the logits."""
    init_scale: float = 1.0
    """Std of the seeded initial logits."""
    gamma: float = TRUTH_GAMMA
    """Discount of the objective J, and the estimators' unless a label sets its own."""
    policy: str = "tabular"
    """``loglinear.POLICY_KINDS``: the parameters Adam updates (logits per state, or shared weights)."""


class Adam:
    """Adam (Kingma & Ba 2015) ascent on one array: bias-corrected moments, betas 0.9 / 0.999."""

    def __init__(self, shape: tuple[int, ...], lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        self.m, self.v = np.zeros(shape), np.zeros(shape)
        self.lr, self.b1, self.b2, self.eps, self.k = lr, b1, b2, eps, 0

    def step(self, g: np.ndarray) -> np.ndarray:
        """The update to add to the parameters for gradient ``g`` (ascent)."""
        self.k += 1
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        mh = self.m / (1 - self.b1 ** self.k)
        vh = self.v / (1 - self.b2 ** self.k)
        return self.lr * mh / (np.sqrt(vh) + self.eps)


def learn(mdp, pol, contender: Contender, s: RaceSettings, seed: int):
    """The race's learner: ``s.steps`` updates of ``pol.params`` in place, yielding after each.
    Its sampling stream is seeded by ``seed`` alone, so every estimator of a seed starts from the
    same policy and draws its first batch with the same uniforms."""
    opt = Adam(pol.params.shape, s.lr)
    rng = np.random.default_rng([seed, 0x524143])
    fps = needs_fingerprint([contender])
    for _ in range(s.steps):
        smp = sample_batch(mdp, pol.act_probs, s.B, s.G, rng, fingerprints=fps)
        adv = advantages(contender, Batch.from_records(smp.records), s.gamma)
        pol.params[...] += opt.step(gradient_estimate(pol, smp, adv))
        yield pol


def run(cfg: MDPConfig, seed: int, contender: Contender, s: RaceSettings) -> dict:
    """One training run: ``{"J": [J_0, ..., J_steps], "J_opt": J*}``."""
    mdp = generate(cfg, seed)
    pol = make_policy(s.policy, mdp, seed, scale=s.init_scale)
    J = [objective(mdp, pol, s.gamma)]
    J += [objective(mdp, p, s.gamma) for p in learn(mdp, pol, contender, s, seed)]
    return {"J": J, "J_opt": optimal_objective(mdp, s.gamma)}


def threshold(J0: float, J_opt: float, frac: float = 0.9) -> float:
    """The J that closes ``frac`` of the gap from the initial policy's J to the optimum."""
    return J0 + frac * (J_opt - J0)
