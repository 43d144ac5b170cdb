"""Every registered scorer (except the toy world's, documented with the demo) has a row in docs/rewards.md."""

from pathlib import Path

from genalign.rewards.registry import REWARD_OPTIONS, REWARDS

DOC = Path(__file__).resolve().parents[3] / "docs" / "rewards.md"


def test_every_registered_reward_has_options_and_a_docs_row():
    text = DOC.read_text(encoding="utf-8")
    names = [name for name in REWARDS.names() if not name.startswith("toy_")]
    assert set(REWARDS.names()) == set(REWARD_OPTIONS)
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"docs/rewards.md has no row for {missing}"
