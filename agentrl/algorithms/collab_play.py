"""One collaboration iteration's episodes (CCPO / SEPO, arXiv 2603.21563): the ``collab`` plug-in's
``roll_out``.

For each task of TRL's generation batch (one task = one collaboration; TRL's ``num_generations``
copies of a task are the prompt group):

1. **Joint rollouts.** Each role in order plays one turn on ``agentrl/MathAnswer-v0`` through the
   player's ``play`` with the ``role`` context (``agentrl.collab.context``), generating with
   its own policy (``PolicyStore.use`` / ``generate`` / ``tokenizer``): the Thinker writes a plan
   (any ``\\boxed{}`` in it is removed before the Solver reads it), the Solver answers from
   problem + plan and the env's verifier grades the answer (R_joint).
2. **Counterfactuals** (``ccpo``, ``ccpo_bonus``): the collaboration without its first role (the
   Solver alone on the problem, App. C.2 Eq. 23), sampled independently of the Thinker's turn, one
   per joint rollout (R_solo). Timed as ``collab/counterfactual_s``.
3. **Ratings** (``sepo``): both roles, with their current weights, rate each finished
   collaboration (Sec. 3.3); the parsed (Thinker share, Solver share) pairs go on the Solver's
   record. Ratings are not trained.
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any

from agentrl.collab import Collaboration, Role, clean_output, counterfactual
from agentrl.credit.collab import SOLVER, THINKER, parse_rating, rating_prompt
from agentrl.policies import PolicyStore
from agentrl.records import StepRecord
from agentrl.rollout.episodes import Episode, GenerateOutput
from agentrl.rollout.prompts import chat_text, decode_response, encode


class CollabPlay:
    """Plays a collaboration's roles, counterfactuals and ratings with the roles' policies.

    Args:
        collab: the run's collaboration.
        policies: where each role's weights live.
        need_solo: play the counterfactual solo collaboration (``ccpo``, ``ccpo_bonus``).
        need_ratings: rate each collaboration (``sepo``).
        rating_template: the SEPO rating prompt.
        wrong_answer_reward: the verifier's reward for a wrong answer: what a final turn that could
            not be played gets.
    """

    def __init__(self, collab: Collaboration, policies: PolicyStore, need_solo: bool, need_ratings: bool,
                 rating_template: str, wrong_answer_reward: float):
        self.collab = collab
        self.policies = policies
        self.need_solo = need_solo
        self.need_ratings = need_ratings
        self.rating_template = rating_template
        self.wrong_answer_reward = wrong_answer_reward
        self.times: dict[str, float] = {}
        """The latest iteration's ``collab/<phase>_s`` and ``_cpu_s`` seconds."""

    def episodes(self, player, tasks: list[dict[str, Any]], train: tuple[str, ...]) -> list[Episode]:
        """Joint rollouts, counterfactuals and ratings of this rank's tasks (module steps 1-3);
        the episodes of the roles in ``train`` are marked trained."""
        self.times = {f"{p}{u}": 0.0 for p in ("counterfactual", "rating") for u in ("_s", "_cpu_s")}
        with self._timed("joint"):
            joint = self.play(player, self.collab, tasks, "joint", set(train))
        episodes = [ep for eps in joint for ep in eps]
        if self.need_solo:
            with self._timed("counterfactual"):
                solo = self.play(player, counterfactual(self.collab, self.collab.roles[0].name), tasks, "solo",
                                 set())
            episodes += [ep for eps in solo for ep in eps]
        if self.need_ratings:
            with self._timed("rating"):
                self.rate(joint)
        return episodes

    @contextlib.contextmanager
    def _timed(self, phase: str):
        """Wall and CPU seconds of a rollout phase (``collab/<phase>_s``, ``collab/<phase>_cpu_s``):
        on a machine shared with other jobs this process's CPU time is the steadier figure."""
        t, c = time.perf_counter(), time.process_time()
        yield
        self.times[f"{phase}_s"] = time.perf_counter() - t
        self.times[f"{phase}_cpu_s"] = time.process_time() - c

    def play(self, player, c: Collaboration, tasks: list[dict[str, Any]], part: str,
             train: set[str]) -> list[list[Episode]]:
        """Play collaboration ``c`` on ``tasks``, role after role; one episode list per role.
        Every record is tagged with the info keys the collaboration credit modules read."""
        index = {r.name: i for i, r in enumerate(self.collab.roles)}
        outputs: list[dict[str, str]] = [{} for _ in tasks]
        per_role = []
        for role in c.roles:
            final = role.name == c.final.name
            rtasks = [dict(t, traj_id=f"{t['traj_id']}:{part}:{role.name}", options={**t["options"], "grade": final},
                           role=role, outputs=dict(outputs[k]), part=part, collab_id=t["traj_id"],
                           train=role.name in train) for k, t in enumerate(tasks)]
            eps = self.play_role(player, role, rtasks)
            tag = dict(role=role.name, role_index=index[role.name], n_roles=len(self.collab.roles), part=part)
            for k, ep in enumerate(eps):
                if not ep.steps:  # the prompt did not fit or the env failed: an empty, wrong turn
                    self._empty_turn(ep, final)
                outputs[k][role.name] = clean_output(role, ep.steps[0].info.get("response", ""))
                for r in ep.steps:
                    r.info.update(tag, collab_id=tasks[k]["traj_id"])
            per_role.append(eps)
        return per_role

    def play_role(self, player, role: Role, tasks: list[dict[str, Any]]) -> list[Episode]:
        """One role's turns, generated by its policy with its tokenizer (``agentrl.policies``)."""
        with self.policies.use(role.name):
            return player.play(tasks, generate=functools.partial(self.policies.generate, role.name),
                                   tokenizer=self.policies.tokenizer(role.name), context_mode="role", prefill="",
                                   max_turns=1)

    def _generate_as(self, role: Role, prompts: list[list[int]]) -> list[list[int]]:
        """Completions of ``prompts`` (in the role's tokenizer) by the role's current policy."""
        out = self.policies.generate(role.name, prompts)
        return out.completion_ids if isinstance(out, GenerateOutput) else out

    def _empty_turn(self, ep: Episode, final: bool) -> None:
        reward = self.wrong_answer_reward if final else 0.0
        ep.steps.append(StepRecord(group_id=ep.group_id, traj_id=ep.traj_id, t=0, obs="", action="",
                                   reward=reward, done=True, valid=False, truncated=True,
                                   info={"response": "", "error": ep.error or "prompt over max_prompt_tokens"}))

    def rate(self, joint: list[list[Episode]]) -> None:
        """SEPO: the first and the last role rate each collaboration (Sec. 3.3); the parsed pairs
        go into the last role's record as ``info.ratings``."""
        first, last = self.collab.roles[0], self.collab.roles[-1]
        answers = [ep.steps[0] for ep in joint[-1]]
        thoughts = [clean_output(first, ep.steps[0].info.get("response", "")) for ep in joint[0]]
        ratings = {}
        for rater, role in ((THINKER, first), (SOLVER, last)):
            tok = self.policies.tokenizer(role.name)
            prompts = [encode(tok, chat_text(tok, rating_prompt(rater, a.obs, th, a.info.get("response", ""),
                                                                  a.reward > 0, self.rating_template)))
                       for a, th in zip(answers, thoughts, strict=True)]
            ids = self._generate_as(role, prompts)
            ratings[rater] = [parse_rating(decode_response(tok, c), a.reward > 0)
                              for c, a in zip(ids, answers, strict=True)]
        for k, a in enumerate(answers):
            a.info["ratings"] = {who: [r[k].thinker, r[k].solver, r[k].valid] for who, r in ratings.items()}
