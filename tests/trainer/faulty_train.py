"""``python faulty_train.py POINT STEP RECIPE [--field value ...]``: ``agentrl.train`` that kills
itself with SIGKILL at POINT when the trainer is at global step STEP (fault injection for
tests/trainer/test_checkpoint_faults.py). Points, in the order a step and its save run:

- ``mid_step``: inside the training step after step STEP (nothing of that step saved);
- ``mid_rollout``: in the rollout of the step after STEP, at its second env step (some turns played);
- ``mid_wait``: an asynchronous run's learner waiting for the producer's batch of step STEP;
- ``save_start``: entering the checkpoint save of step STEP;
- ``after_weights``: the weights of checkpoint STEP written, not its optimizer;
- ``after_optimizer``: weights and optimizer written, not the RNG states;
- ``before_state``: everything but ``trainer_state.json`` written;
- ``before_publish``: the checkpoint fully written, not yet renamed into place;
- ``before_rotate``: renamed into place, older checkpoints not yet rotated.
"""

import os
import signal
import sys

from transformers import Trainer, TrainerState, trainer_utils

import agentrl.checkpoints as ckpts
from agentrl import train
from agentrl.trainer import AgentGRPOTrainer

point, step, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
state = {"trainer": None}


def die():
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def at(cls, name, when, get_trainer=lambda self: self):
    orig = getattr(cls, name)

    def patched(self, *a, **kw):
        tr = get_trainer(self)
        if tr is not None and tr.state.global_step == step:
            die()
        return orig(self, *a, **kw)

    setattr(cls, name, patched)


_orig_init = AgentGRPOTrainer.__init__


def _keep_trainer(self, *a, **kw):
    _orig_init(self, *a, **kw)
    state["trainer"] = self


AgentGRPOTrainer.__init__ = _keep_trainer  # the points below that patch module functions ask it its step

if point == "mid_step":
    at(AgentGRPOTrainer, "training_step", point)
elif point == "mid_rollout":
    from agentrl.rollout import episodes

    orig_step, env_steps = episodes._Rollout._step, []

    def env_step(self, *a, **kw):
        if state["trainer"] is not None and state["trainer"].state.global_step == step:
            env_steps.append(1)
            if len(env_steps) == 2:
                die()
        return orig_step(self, *a, **kw)

    episodes._Rollout._step = env_step
elif point == "mid_wait":
    from agentrl.producer import async_source

    at(async_source.AsyncSource, "_receive", point, get_trainer=lambda self: state["trainer"])
elif point == "save_start":
    at(Trainer, "_save_checkpoint", point)
elif point == "after_weights":
    at(Trainer, "_save_optimizer_and_scheduler", point)
elif point == "after_optimizer":
    at(Trainer, "_save_rng_state", point)
elif point == "before_state":
    orig_save = TrainerState.save_to_json

    def save_to_json(self, path):
        if "checkpoint-" in str(path) and self.global_step == step:
            die()
        return orig_save(self, path)

    TrainerState.save_to_json = save_to_json
elif point in ("before_publish", "before_rotate"):
    name, mod = ("publish", ckpts) if point == "before_publish" else ("rotate_checkpoints", trainer_utils)
    orig = getattr(mod, name)

    def patched(*a, **kw):
        if state["trainer"].state.global_step == step:
            die()
        return orig(*a, **kw)

    setattr(mod, name, patched)
else:
    raise SystemExit(f"unknown fault point {point}")

sys.exit(train.main(argv))
