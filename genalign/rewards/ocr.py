"""OCR reward: does the image spell the quoted text of the prompt? (Flow-GRPO's text-rendering reward)

Where it fits: a rule reward scored by the reward runtime on decoded uint8 rollout images.

The rule (Flow-GRPO `flow_grpo/ocr.py`, docs/algorithms.md §7.2):
  target     = the text between the first pair of double quotes in the prompt,
               lower-cased, spaces removed (`A sign that says "Hello World"` -> "helloworld");
  recognised = the concatenation of every detected line the engine returns (PaddleOCR's `ocr()`
               drops lines scored below its `drop_score`, 0.5) with confidence > 0, same
               normalisation;
  reward     = 1 if target is a substring of recognised, else max(0, 1 - Levenshtein/len(target)).
Range [0, 1]. A prompt without a quoted target scores 0 and is counted in a logged warning:
a data problem, not a crash (Flow-GRPO scores OCR failures 0 as well).

Engines: "rapidocr" (default) runs the PP-OCRv4 detector/recogniser shipped inside the
`rapidocr-onnxruntime` wheel on onnxruntime's CPU provider — the same PP-OCR family Flow-GRPO
calls through PaddleOCR (2.9.1, its README), with no download. The angle classifier is off,
like Flow-GRPO's `use_angle_cls=False`, and lines scored below `min_line_score` (0.5, the
`drop_score` PaddleOCR's `ocr()` applies before Flow-GRPO sees a line) are dropped. What
still differs from Flow-GRPO's engine: rapidocr's Chinese+English PP-OCRv4 recogniser and its
detector settings (PaddleOCR's English models with its own), and the channel order (Flow-GRPO
hands PaddleOCR the RGB array where it expects OpenCV's BGR; genalign hands rapidocr BGR).
"tesseract" shells out to a `tesseract` binary when one is installed. OCR always runs on the
CPU: `device` only places torch models, and this reward has none.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch

from genalign.rewards.options import parse_options

log = logging.getLogger(__name__)

OCREngine = Literal["rapidocr", "tesseract"]
ENGINES = get_args(OCREngine)


@dataclass
class OCROptions:
    engine: OCREngine = "rapidocr"
    """"rapidocr" (PP-OCR models from the wheel) or "tesseract" (needs the binary on PATH)."""
    min_line_score: float = 0.5
    """rapidocr: recognised lines scored below this are dropped before the rule reads them, as
    PaddleOCR's `ocr()` drops lines below its drop_score (0.5) in Flow-GRPO's scorer."""
    num_threads: int = 1
    """onnxruntime intra-op threads for rapidocr (reward workers are usually one CPU each)."""
    tesseract_cmd: str = "tesseract"
    """Binary name or path used when engine="tesseract"."""
    tesseract_psm: int = 6
    """Tesseract page segmentation mode (6: one uniform block of text)."""

    def required_package(self) -> tuple[str, str] | None:
        """(module, genalign extra) these options import: rapidocr's wheel; tesseract is a binary."""
        return ("rapidocr_onnxruntime", "ocr") if self.engine == "rapidocr" else None

    def device_models(self, reward: str) -> tuple[()]:
        """Models on the scorer's device (the memory plan counts them): none, OCR runs on the CPU."""
        return ()


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions, each cost 1) between two strings."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(
                min(
                    previous[j] + 1,  # delete char_a
                    current[j - 1] + 1,  # insert char_b
                    previous[j - 1] + (char_a != char_b),
                )
            )  # substitute
        previous = current
    return previous[-1]


def normalise_text(text: str) -> str:
    """Lower-case and drop spaces, as Flow-GRPO does on both sides of the comparison."""
    return text.replace(" ", "").lower()


def quoted_target(prompt: str) -> str | None:
    """The normalised text between the first pair of double quotes, or None when there is none."""
    parts = prompt.split('"')
    if len(parts) < 3:
        return None
    target = normalise_text(parts[1])
    return target or None


def ocr_text_reward(target: str, recognised: str) -> float:
    """1 if `target` occurs in `recognised`, else max(0, 1 - distance/len(target)); both normalised."""
    if target in recognised:
        return 1.0
    distance = min(levenshtein(recognised, target), len(target))
    return 1.0 - distance / len(target)


class OCRReward:
    """Flow-GRPO OCR reward in [0, 1]; see the module docstring for the rule."""

    name = "ocr"

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, OCROptions, kwargs)
        if self.options.engine not in ENGINES:
            raise ValueError(
                f"reward.kwargs.ocr.engine={self.options.engine!r} is not supported; choose one of {', '.join(ENGINES)}"
            )
        self.device = device
        self.missing_target_count = 0
        """Prompts seen so far without a quoted target (each scored 0)."""
        if self.options.engine == "rapidocr":
            self._read = self._rapidocr_reader()
        else:
            self._read = self._tesseract_reader()

    # ------------------------------------------------------------------ engines
    def _rapidocr_reader(self):
        from rapidocr_onnxruntime import RapidOCR

        threads = self.options.num_threads
        # text_score drops low-confidence lines as PaddleOCR's drop_score does; the rule's own
        # "confidence > 0" filter is applied below
        engine = RapidOCR(
            text_score=self.options.min_line_score,
            use_cls=False,
            print_verbose=False,
            intra_op_num_threads=threads,
            inter_op_num_threads=1,
        )

        def read(image_hwc: np.ndarray) -> str:
            bgr = np.ascontiguousarray(image_hwc[..., ::-1])  # rapidocr takes OpenCV's BGR order
            lines, _ = engine(bgr)
            return "".join(text for _, text, confidence in (lines or []) if float(confidence) > 0)

        return read

    def _tesseract_reader(self):
        binary = shutil.which(self.options.tesseract_cmd)
        if binary is None:
            raise FileNotFoundError(
                f"reward.kwargs.ocr.engine=tesseract: no {self.options.tesseract_cmd!r} binary on PATH; install "
                f"tesseract (e.g. apt-get install tesseract-ocr), set reward.kwargs.ocr.tesseract_cmd to its path, "
                f"or use engine=rapidocr"
            )
        psm = str(self.options.tesseract_psm)

        def read(image_hwc: np.ndarray) -> str:
            from PIL import Image

            png = io.BytesIO()
            Image.fromarray(image_hwc).save(png, format="PNG")
            done = subprocess.run(
                [binary, "stdin", "stdout", "--psm", psm], input=png.getvalue(), capture_output=True, check=False
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"tesseract exited with {done.returncode}: {done.stderr.decode(errors='replace').strip()}"
                )
            return done.stdout.decode(errors="replace").replace("\n", "").replace("\f", "")

        return read

    # ------------------------------------------------------------------ contract
    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """uint8 [B, 3, H, W] -> float32 [B] in [0, 1]."""
        pixels = images.permute(0, 2, 3, 1).cpu().numpy()  # [B, H, W, 3] uint8 RGB
        rewards = []
        missing = []
        for image_hwc, prompt in zip(pixels, prompts):
            target = quoted_target(prompt)
            if target is None:
                missing.append(prompt)
                rewards.append(0.0)
                continue
            rewards.append(ocr_text_reward(target, normalise_text(self._read(image_hwc))))
        if missing:
            self.missing_target_count += len(missing)
            log.warning(
                "ocr: %d prompt(s) in this batch have no text between double quotes (e.g. %r); "
                "they score 0 (%d so far)",
                len(missing),
                missing[0],
                self.missing_target_count,
            )
        return torch.tensor(rewards, dtype=torch.float32)
