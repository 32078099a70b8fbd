"""A recipe built from parts (``base: [PART, ...]``, agentrl/recipe_file.py): what wins, the one-line
errors, and the output_dir derived from the recipe's path. Files only, no TRL: < 1 s."""

from pathlib import Path

import pytest

from agentrl.recipe_file import RecipeError, default_output_dir, read_recipe_file


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture
def parts(tmp_path):
    """recipes/p/_parts/{env,model,credit}.yaml and a row naming them."""
    _write(tmp_path / "recipes" / "p", {
        "_parts/common.yaml": "learning_rate: 1.0e-6\nnum_generations: 8\n",
        "_parts/env.yaml": "env_id: agentrl/TextCraft-v0\nenv_kwargs: {prompt_style: compact, depth: 2}\n",
        "_parts/model.yaml": "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\n",
        "_parts/credit.yaml": "credit: bipace_q\ncredit_kwargs: {eps: 0.1, w: 1.0}\n",
        "row.yaml": "base: [_parts/common.yaml, _parts/env.yaml, _parts/model.yaml, _parts/credit.yaml]\n",
    })
    return tmp_path / "recipes" / "p"


def test_parts_merge_and_the_row_wins(parts):
    got = read_recipe_file(parts / "row.yaml")
    assert got == {"learning_rate": 1e-6, "num_generations": 8, "env_id": "agentrl/TextCraft-v0",
                   "env_kwargs": {"prompt_style": "compact", "depth": 2}, "model_name_or_path": "Qwen/Qwen2.5-7B-Instruct",
                   "credit": "bipace_q", "credit_kwargs": {"eps": 0.1, "w": 1.0}, "output_dir": "runs/p/row"}
    # the row's own keys come last: they replace a part's (a mapping whole, not merged key by key)
    _write(parts, {"ablation.yaml": "base: [_parts/common.yaml, _parts/env.yaml, _parts/model.yaml, _parts/credit.yaml]\n"
                                    "credit_kwargs: {eps: 0.25}\nlearning_rate: 2.0e-6\n"})
    got = read_recipe_file(parts / "ablation.yaml")
    assert (got["credit_kwargs"], got["learning_rate"], got["credit"]) == ({"eps": 0.25}, 2e-6, "bipace_q")
    # parts never share a key, so their order changes nothing but the order of the keys
    _write(parts, {"reordered.yaml": "base: [_parts/credit.yaml, _parts/model.yaml, _parts/env.yaml, _parts/common.yaml]\n"})
    reordered = read_recipe_file(parts / "reordered.yaml")
    assert list(reordered)[:2] == ["credit", "credit_kwargs"]
    assert reordered == {**read_recipe_file(parts / "row.yaml"), "output_dir": "runs/p/reordered"}


def test_a_part_may_build_on_another(tmp_path):
    # recipes/<paper>/_parts/cpu.yaml over recipes/_parts/cpu.yaml: the nearer file's keys win
    _write(tmp_path / "recipes", {
        "_parts/cpu.yaml": "use_cpu: true\nlearning_rate: 1.0e-5\nmax_steps: 2\n",
        "p/_parts/cpu.yaml": "base: ../../_parts/cpu.yaml\nenv_id: agentrl/TextCraft-v0\nlearning_rate: 2.0e-3\n",
        "p/cpu/p_grpo.yaml": "base: ../_parts/cpu.yaml\ncredit: grpo\nmax_steps: 3\n",
    })
    assert read_recipe_file(tmp_path / "recipes/p/cpu/p_grpo.yaml") == {
        "use_cpu": True, "learning_rate": 2e-3, "max_steps": 3, "env_id": "agentrl/TextCraft-v0", "credit": "grpo",
        "output_dir": "runs/p/cpu/p_grpo"}


@pytest.mark.parametrize("files, needle", [
    ({"_parts/model.yaml": "model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct\nlearning_rate: 5.0e-7\n"},
     "row.yaml: key 'learning_rate' is set by two of its bases, _parts/common.yaml and _parts/model.yaml; "
     "set it in one of them, or in row.yaml itself"),
    # the same value twice is refused too: a setting is written once
    ({"_parts/model.yaml": "model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct\nnum_generations: 8\n"},
     "key 'num_generations' is set by two of its bases, _parts/common.yaml and _parts/model.yaml"),
    ({"row.yaml": "base: [_parts/common.yaml, _parts/nowhere.yaml]\n"}, "row.yaml: base recipe not found: _parts/nowhere.yaml"),
    ({"_parts/env.yaml": "- env_id\n- agentrl/TextCraft-v0\n"},
     "row.yaml: base _parts/env.yaml must be a YAML mapping of config keys"),
    ({"_parts/env.yaml": "# nothing yet\n"}, "row.yaml: base _parts/env.yaml is empty"),
    ({"_parts/model.yaml": "model_name_or_path: x\nmodel_name_or_path: y\n"},
     "row.yaml: base _parts/model.yaml: key 'model_name_or_path' is given twice (line 2)"),
    ({"_parts/credit.yaml": "base: ../row.yaml\ncredit: grpo\n"},
     "base recipes form a cycle (row.yaml -> credit.yaml -> row.yaml)"),
    ({"row.yaml": "base: [_parts/env.yaml, _parts/env.yaml]\n"}, "row.yaml: base names _parts/env.yaml twice"),
    ({"row.yaml": "base: []\n"}, "row.yaml: base must be the path of another recipe or a list of them, got []"),
    ({"row.yaml": "base: {env: _parts/env.yaml}\n"}, "base must be the path of another recipe or a list of them"),
    ({"row.yaml": "base: [_parts/env.yaml, 3]\n"}, "base must be the path of another recipe or a list of them"),
])
def test_composition_errors_are_one_line(parts, files, needle):
    _write(parts, files)
    with pytest.raises(RecipeError) as e:
        read_recipe_file(parts / "row.yaml")
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_output_dir_derived_from_the_path(tmp_path, parts):
    assert default_output_dir("recipes/bipace/alfworld_bipace_q_7b.yaml") == "runs/bipace/alfworld_bipace_q_7b"
    assert default_output_dir(tmp_path / "recipes" / "x" / "cpu" / "y.yml") == "runs/x/cpu/y"
    # the last recipes/ folder counts (a checkout under a folder named recipes)
    assert default_output_dir(tmp_path / "recipes" / "repo" / "recipes" / "a.yaml") == "runs/a"
    assert default_output_dir(tmp_path / "mine.yaml") == "runs/mine"  # outside recipes/: the file's name
    # a recipe that sets output_dir keeps it; one that does not gets its own path's, never its base's
    _write(parts, {"row.yaml": "base: [_parts/env.yaml]\noutput_dir: /scratch/run1\n",
                   "../headline.yaml": "base: p/row.yaml\n"})
    assert read_recipe_file(parts / "row.yaml")["output_dir"] == "/scratch/run1"
    assert read_recipe_file(parts.parent / "headline.yaml")["output_dir"] == "/scratch/run1"  # set by its base
    _write(parts, {"row.yaml": "base: [_parts/env.yaml]\n"})
    assert read_recipe_file(parts.parent / "headline.yaml")["output_dir"] == "runs/headline"
