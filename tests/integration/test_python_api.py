"""The Python API (genalign/api.py) as docs/running.md documents it: the page's example runs as
printed, and `import genalign` stays light until a name is used."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "running.md"


def test_the_documented_example_runs_as_printed(tmp_path, monkeypatch, capsys):
    [code] = re.findall(r"<!-- example: python_api.py -->\n```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    monkeypatch.chdir(tmp_path)  # the example writes outputs/api_demo under the working directory
    namespace: dict = {"__name__": "python_api"}
    exec(compile(code, "python_api.py", "exec"), namespace)  # noqa: S102 - the page's own code
    result, watch = namespace["result"], namespace["watch"]
    assert result.steps_trained == 2 and len(watch.rewards) == 2
    assert result.metrics["reward_mean"] == watch.rewards[-1]
    assert result.output_dir == Path("outputs/api_demo") and (tmp_path / "outputs/api_demo/metrics.csv").is_file()
    assert result.checkpoint.name == "checkpoint-final" and "eval_reward_mean" in result.eval_metrics
    out = capsys.readouterr().out
    assert "eval at step 2: held-out reward" in out and "saved outputs/api_demo/checkpoint-final" in out
    # run again: the checkpoint is at trainer.num_steps, nothing is left, and the result says so
    again = namespace["train"](
        "experiment/toy/shapes_grpo",
        ["trainer.num_steps=2", "trainer.resume_from=auto", "trainer.output_dir=outputs/api_demo"],
    )
    assert again.steps_trained == 0


def test_import_genalign_is_light_and_names_the_api():
    code = (
        "import sys, genalign; assert 'torch' not in sys.modules, 'torch'; "
        "print(sorted(set(genalign.__all__))); from genalign import train, Trainer; "
        "assert 'torch' in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(
        sorted({"__version__", "load_config", "train", "Trainer", "TrainerCallback", "TrainResult"})
    )
