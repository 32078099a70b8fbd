"""Contract tests for the private TRL 1.16 hooks AgentGRPOTrainer relies on.

A TRL upgrade that renames, re-signs or changes the behaviour of one of these fails here loudly.
Runtime: ~1 s (after TRL's import).
"""

import inspect

import pytest
import torch


def _params(fn):
    return list(inspect.signature(fn).parameters)


def test_trl_version_pinned():
    import trl

    assert trl.__version__ == "1.16.0", "AgentGRPOTrainer was written against TRL 1.16.0: re-run these checks"


def test_private_method_signatures():
    from trl import GRPOTrainer

    assert _params(GRPOTrainer._generate_single_turn)[:5] == [
        "self", "prompt_ids", "images", "multimodal_fields", "num_generations"]
    assert _params(GRPOTrainer._compute_loss) == ["self", "model", "inputs"]
    assert _params(GRPOTrainer._prepare_inputs) == ["self", "generation_batch"]
    assert _params(GRPOTrainer.training_step)[:4] == ["self", "model", "inputs", "num_items_in_batch"]
    # the guard's and the runner's checkpoint parts are written after Trainer's own optimizer /
    # scheduler save and read after its load
    assert _params(GRPOTrainer._save_optimizer_and_scheduler) == ["self", "output_dir"]
    assert _params(GRPOTrainer._load_optimizer_and_scheduler) == ["self", "checkpoint"]
    assert _params(GRPOTrainer.save_model) == ["self", "output_dir", "_internal_call"]
    assert _params(GRPOTrainer.create_scheduler) == ["self", "num_training_steps", "optimizer"]
    # the Learner handle gets Trainer's weight-decay rule unbound (self=None): it must read nothing of self
    from transformers import Trainer

    src = inspect.getsource(Trainer.get_decay_parameter_names)
    assert _params(Trainer.get_decay_parameter_names) == ["self", "model"] and "self." not in src


def test_overridden_trl_methods_are_the_pinned_ones():
    # every GRPOTrainer method the one TRL subclass overrides; a new override needs its contract here.
    # Private: _compute_loss (our loss), _prepare_inputs (TRL's buffering of one rollout's
    # micro-batches), and the checkpoint's optimizer files (the guard's and the runner's parts).
    from trl import GRPOTrainer

    from agentrl.trainer import AgentGRPOTrainer

    overridden = sorted(n for n, v in vars(AgentGRPOTrainer).items() if callable(v) and hasattr(GRPOTrainer, n))
    assert overridden == ["__init__", "_compute_loss", "_load_optimizer_and_scheduler", "_prepare_inputs",
                          "_save_optimizer_and_scheduler", "create_scheduler", "log", "save_model", "train",
                          "training_step"]


def test_instance_patches_of_trainer_members_are_the_pinned_ones():
    # members patched on the instance, where the override test above cannot see them:
    # agentrl.checkpoints.install_atomic_saves replaces trainer._save_checkpoint and, for the
    # length of one save, trainer._get_output_dir (Trainer builds the checkpoint folder from it,
    # then rotates); agentrl.trainer.memory_phases.instrument wraps _save_checkpoint again (a phase)
    from transformers import Trainer, trainer_utils
    from trl import GRPOTrainer

    assert _params(Trainer._save_checkpoint) == ["self", "model", "trial"]
    assert _params(Trainer._get_output_dir) == ["self", "trial"]
    # TRL's own _save_checkpoint (its model card) calls Trainer's: the patch wraps the whole chain
    assert "super()._save_checkpoint(model, trial)" in inspect.getsource(GRPOTrainer._save_checkpoint)
    src = inspect.getsource(Trainer._save_checkpoint)
    assert 'checkpoint_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"' in src
    assert "run_dir = self._get_output_dir(trial=trial)" in src  # the staging folder goes in here
    assert trainer_utils.PREFIX_CHECKPOINT_DIR == "checkpoint"
    assert _params(trainer_utils.rotate_checkpoints)[:4] == [
        "output_dir", "save_total_limit", "best_model_checkpoint", "use_mtime"]


def test_the_trainers_loss_sum_is_reset_by_subtraction():
    # AgentGRPOTrainer.log zeroes a non-finite _tr_loss: the Trainer accumulates the micro-steps'
    # losses in it and resets it with `tr_loss -= tr_loss` after logging (NaN - NaN is NaN)
    from transformers import Trainer

    assert "self._tr_loss += tr_loss_step" in inspect.getsource(Trainer._run_epoch)
    assert "tr_loss -= tr_loss" in inspect.getsource(Trainer._maybe_log_save_evaluate)


def test_prepare_inputs_buffers_one_rollout_per_generate_every_steps():
    # AgentGRPOTrainer._prepare_inputs mirrors TRL's buffering (same _step / _buffered_inputs
    # bookkeeping, resume included: _buffered_inputs is None after a resume) and replaces the
    # rollout, the shuffle and the split by its own
    # A behaviour probe (was a match of the source text): TRL's _prepare_inputs and training_step
    # called on a trainer without a model, the rollout counted instead of run
    from collections import defaultdict
    from types import SimpleNamespace

    from transformers import Trainer
    from trl import GRPOTrainer

    rollouts = []

    class Probe(GRPOTrainer):
        def _generate_and_score_completions(self, batch):
            rollouts.append(self._step)
            return {"x": torch.arange(4).reshape(4, 1)}  # 4 rows: 2 micro-batches of 2

    probe = object.__new__(Probe)
    probe.model = SimpleNamespace(training=True)
    probe.args = SimpleNamespace(report_to=[], steps_per_generation=2)
    probe.accelerator = SimpleNamespace(is_main_process=True)
    probe.num_iterations, probe._step, probe._buffered_inputs = 2, 0, None  # a rollout every 2 x 2 micro-steps
    served = []
    for step in range(8):
        probe._step = step
        if step == 6:
            probe._buffered_inputs = None  # as after a resume: a new rollout, whatever the step
        served.append(probe._prepare_inputs({}))
    assert rollouts == [0, 4, 6]
    assert served[0] is served[2] and served[1] is served[3]  # micro-batch step % steps_per_generation
    assert sorted(served[0]["x"].flatten().tolist() + served[1]["x"].flatten().tolist()) == [0, 1, 2, 3]
    # training_step counts the micro-step after the update (the trainer's micro_step reads it)
    seen = []
    original = Trainer.training_step
    Trainer.training_step = lambda self, model, inputs, n=None: seen.append(self._step) or torch.tensor(1.0)
    try:
        probe._step, probe.current_gradient_accumulation_steps, probe._current_train_step_time = 5, 2, 0.0
        probe._metrics = {"train": defaultdict(list)}
        GRPOTrainer.training_step(probe, None, {}, 1)
    finally:
        Trainer.training_step = original
    assert seen == [5] and probe._step == 6


def test_compute_loss_is_what_compute_loss_calls():
    # Trainer.training_step -> GRPOTrainer.compute_loss -> _compute_loss(model, inputs), the override
    # a behaviour probe (was a match of the source text): compute_loss called on a trainer whose
    # _compute_loss is ours returns what ours returned, for what it was given
    from types import SimpleNamespace

    from trl import GRPOTrainer

    class Probe(GRPOTrainer):
        def _compute_loss(self, model, inputs):
            return ("ours", model, inputs)

    probe = object.__new__(Probe)  # no model: only what compute_loss and its profiling decorator read
    probe.args = SimpleNamespace(report_to=[])
    probe.accelerator = SimpleNamespace(is_main_process=True)
    assert probe.compute_loss("model", {"x": 1}, num_items_in_batch=3) == ("ours", "model", {"x": 1})


def test_generate_single_turn_hf_path_contract():
    # the HF path returns (completion_ids as lists cut after the first EOS, logprobs=None)
    from trl import GRPOTrainer

    src = inspect.getsource(GRPOTrainer._generate_single_turn)
    assert "return completion_ids, logprobs" in src
    assert "unwrap_model_for_generation" in src
    assert "gather_deepspeed3_params=self.args.ds3_gather_for_generation" in src


def test_fused_lm_head_gives_the_completion_logprobs(tiny):
    # agentrl.trainer.logprobs reads TRL's fused LM head (add_fused_lm_head, public in
    # trl.trainer.utils): log_probs[:, j] = log p(token j+1 | tokens <= j), 0 where the label is
    # -100. Checked against log_softmax of the plain forward's logits on packed rows.
    import copy

    from trl.trainer.utils import add_fused_lm_head

    from agentrl.rollout.contexts import Row
    from agentrl.rollout.rows import pack_rows
    from agentrl.trainer.logprobs import completion_logps

    model, tok = tiny
    model = copy.deepcopy(model)
    mb = pack_rows([Row([5, 6, 7], [8, 9], [1, 1], [0.0, 0.0]), Row([7], [11, 12, 13], [1, 0, 1], [0.0] * 3)],
                   tok.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).logits.float()
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    with torch.no_grad():
        lp, ent = completion_logps(model, mb, entropy=True)
    full = torch.log_softmax(logits, -1)
    for i, (start, n) in enumerate(((3, 2), (1, 3))):
        for t in range(n):
            tok_id = int(mb["input_ids"][i, start + t])
            assert lp[i, t].item() == pytest.approx(full[i, start + t - 1, tok_id].item(), abs=1e-5)
            p = full[i, start + t - 1].exp()
            assert ent[i, t].item() == pytest.approx(-(p * full[i, start + t - 1]).sum().item(), abs=1e-4)
    assert lp[0, 2].item() == 0.0 and ent[0, 2].item() == 0.0  # padding


def test_metrics_are_lists_per_mode_averaged_and_cleared_at_each_log():
    # AgentGRPOTrainer (and trainer/update.py) append its per-step figures to self._metrics[mode][name]:
    # TRL must keep one list per name and mode, average it (NaN left out) into the next log, then clear it
    # A behaviour probe: TRL's log itself called on a small input, Trainer.log (what it hands to)
    # recorded instead of run
    import math
    from collections import defaultdict
    from types import SimpleNamespace

    from transformers import Trainer
    from trl import GRPOTrainer

    # source text only where no behaviour can be seen without building a whole trainer: the
    # lists are made in __init__ (one per name on first append)
    assert 'self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}' in inspect.getsource(
        GRPOTrainer.__init__)
    handed = []
    probe = object.__new__(GRPOTrainer)
    probe.model = SimpleNamespace(training=True)
    probe.accelerator = SimpleNamespace(is_main_process=False)
    probe.log_completions = False
    probe._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    probe._metrics["train"]["a"] += [1.0, float("nan"), 3.0]  # NaN left out: (1 + 3) / 2 = 2
    probe._metrics["train"]["b"] += [float("nan")]  # nothing valid: None
    original = Trainer.log
    Trainer.log = lambda self, logs, start_time=None: handed.append(dict(logs))
    try:
        GRPOTrainer.log(probe, {"loss": 0.5})
    finally:
        Trainer.log = original
    assert handed == [{"loss": 0.5, "a": 2.0, "b": None}]
    assert probe._metrics["train"] == {}  # cleared after the log
    probe.model.training = False  # in evaluation the eval list, with TRL's eval_ prefix
    probe._metrics["eval"]["a"] += [4.0]
    Trainer.log = lambda self, logs, start_time=None: handed.append(dict(logs))
    try:
        GRPOTrainer.log(probe, {})
    finally:
        Trainer.log = original
    assert handed[-1] == {"eval_a": 4.0} and not math.isnan(handed[-1]["eval_a"])
