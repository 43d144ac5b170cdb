"""The worked examples of docs/rewards.md and docs/extending.md run as printed: the user reward
and the user algorithm, through `reward.allow_import` and `algorithm.allow_import`, the algorithm trained on the toy
model; a scorer that breaks the reward contract is refused by the config checks.

The code blocks marked `<!-- example: NAME.py -->` are written to a temporary directory on
`sys.path`, so an edit of the page or of the interfaces it uses that breaks them fails here.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch
from support import read_rows

from genalign.config.errors import ConfigError
from genalign.preflight.load import load_config
from genalign.rewards.composite import build_reward_runtime
from genalign.training.trainer import Trainer

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = {"my_rewards.py": DOCS / "rewards.md", "vanilla_pg.py": DOCS / "extending.md"}
EXAMPLE = re.compile(r"<!-- example: (\S+) -->\n```python\n(.*?)```", re.S)


@pytest.fixture
def examples(tmp_path, monkeypatch):
    """The pages' example modules, importable by their file names."""
    found = {
        name: code
        for page in sorted(set(PAGES.values()))
        for name, code in EXAMPLE.findall(page.read_text(encoding="utf-8"))
    }
    assert set(found) == set(PAGES), sorted(found)
    assert all(name in dict(EXAMPLE.findall(page.read_text(encoding="utf-8"))) for name, page in PAGES.items())
    for name, code in found.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in found:
        sys.modules.pop(Path(name).stem, None)


def tiny_toy(out: Path, *extra: str) -> list[str]:
    return [
        "rollout.num_steps=3",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=4",
        "actor.gradient_accumulation_steps=1",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.samples_per_prompt=2",
        "eval.batch_size=4",
        "eval.every=2",
        "trainer.num_steps=2",
        "trainer.save_every=0",
        f"trainer.output_dir={out}",
        "trainer.progress_bar=false",
        *extra,
    ]


def test_the_user_reward_loads_through_allow_import_and_scores_as_documented(examples, tmp_path):
    cfg = load_config(
        None,
        [
            "reward.components={my_rewards:Brightness: 1.0}",
            "reward.allow_import=[my_rewards:Brightness]",
            "+reward.kwargs.my_rewards:Brightness.target=0.5",
            "reward.components.toy_shape=0.0",
            f"trainer.output_dir={tmp_path / 'run'}",
        ],
    )
    runtime = build_reward_runtime(cfg.reward, "cpu")
    try:
        images = torch.stack(
            [
                torch.full((3, 4, 4), 0, dtype=torch.uint8),
                torch.full((3, 4, 4), 255, dtype=torch.uint8),
                torch.full((3, 4, 4), 51, dtype=torch.uint8),
            ]
        )  # brightness 0, 1, 0.2
        scores = runtime.score(images, ["a", "b", "c"], [{}, {}, {}])
    finally:
        runtime.close()
    # target 0.5: 1 − |b − 0.5| = 0.5, 0.5, 0.7
    torch.testing.assert_close(scores.components["my_rewards:Brightness"], torch.tensor([0.5, 0.5, 0.7]))


def test_the_user_reward_passes_the_config_checks_and_a_broken_one_is_refused_before_loading(examples, tmp_path):
    """`genalign config` (check_files) imports the allowed class and holds it to the contract
    in rewards/base.py: no `offload`/`onload` is fine (optional), a missing `score` or a
    constructor without device= is one line naming the key."""
    (examples / "broken_rewards.py").write_text(
        "class NoScore:\n    def __init__(self, device='cpu'):\n        pass\n\n"
        "class NoDevice:\n    def __init__(self):\n        pass\n\n    def score(self, images, prompts, metadata):\n"
        "        return images.float().mean((1, 2, 3))\n",
        encoding="utf-8",
    )
    user = ["reward.components.toy_shape=0.0", f"trainer.output_dir={tmp_path / 'run'}"]
    load_config(
        None,
        ["reward.components={my_rewards:Brightness: 1.0}", "reward.allow_import=[my_rewards:Brightness]", *user],
        check_files=True,
    )
    with pytest.raises(ConfigError) as err:
        load_config(
            None,
            [
                "reward.components={broken_rewards:NoScore: 1.0, broken_rewards:NoDevice: 1.0}",
                "reward.allow_import=[broken_rewards:NoScore, broken_rewards:NoDevice]",
                *user,
            ],
            check_files=True,
        )
    assert err.value.problems == [
        "reward.components.broken_rewards:NoScore: NoScore has no score(images, prompts, metadata) method, the one "
        "member a scorer must have (docs/rewards.md#your-own-scorer)",
        "reward.components.broken_rewards:NoDevice: NoDevice(...) must accept device= (and its reward.kwargs options "
        "as keywords); its constructor is NoDevice()",
    ]
    sys.modules.pop("broken_rewards", None)


def test_the_example_algorithm_trains_the_toy_model(examples, tmp_path):
    out = tmp_path / "run"
    # trained on the page's reward too: the toy shape reward is 0 for the 4-step blobs of this tiny run
    overrides = tiny_toy(
        out,
        "algorithm.name=vanilla_pg:VanillaPG",
        "algorithm.timestep_fraction=0.5",
        "rollout.num_steps=4",
        "reward.components={my_rewards:Brightness: 1.0}",
        "reward.components.toy_shape=0.0",
        "reward.allow_import=[my_rewards:Brightness]",
        "algorithm.allow_import=[vanilla_pg:VanillaPG]",
    )
    with pytest.raises(ConfigError, match="VanillaPG has no KL term"):  # its own check, before anything loads
        load_config("experiment/toy/shapes_grpo", overrides + ["algorithm.kl_beta=0.04"])
    cfg = load_config("experiment/toy/shapes_grpo", overrides + ["algorithm.kl_beta=0.0"])
    trainer = Trainer(cfg)
    before = {k: v.clone() for k, v in trainer.parameters.items()}
    trainer.train()
    rows = read_rows(out / "metrics.csv")
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0  # replay scores the rollout's draws exactly
    assert all(math.isfinite(float(r["policy_loss"])) for r in rows)
    assert any(not torch.equal(before[k], v) for k, v in trainer.parameters.items())  # it learned something
