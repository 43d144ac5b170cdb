"""Write genalign/datasets/video/{train,test}.txt: short text-to-video prompts, subject x motion x place.

Deterministic (no randomness, no download): every combination of the lists below, in order.
Test subjects never appear in training, so an eval gain is not memorised prompts.

    python genalign/datasets/video/build.py          # rewrite both files
    python genalign/datasets/video/build.py --check  # exit 1 if they are stale
"""

from __future__ import annotations

import sys
from pathlib import Path

TRAIN_SUBJECTS = [
    "a red fox",
    "a golden retriever",
    "a paper boat",
    "an old steam train",
    "a hot air balloon",
    "a hummingbird",
]
TEST_SUBJECTS = ["a white horse", "a sailboat"]
MOTIONS = ["moving slowly from left to right", "turning around in place", "approaching the camera"]
PLACES = ["on a sunny beach", "in falling snow"]


def prompts(subjects: list[str]) -> list[str]:
    return [
        f"{subject} {motion} {place}, cinematic, smooth camera"
        for subject in subjects
        for motion in MOTIONS
        for place in PLACES
    ]


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    files = {here / "train.txt": prompts(TRAIN_SUBJECTS), here / "test.txt": prompts(TEST_SUBJECTS)}
    if "--check" in argv:
        stale = [
            str(path)
            for path, lines in files.items()
            if not path.exists() or path.read_text() != "\n".join(lines) + "\n"
        ]
        if stale:
            print("stale: " + ", ".join(stale) + "; run python genalign/datasets/video/build.py")
            return 1
        return 0
    for path, lines in files.items():
        path.write_text("\n".join(lines) + "\n")
        print(f"{path}: {len(lines)} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
