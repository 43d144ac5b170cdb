"""`python -m genalign.train ARGS` == `genalign train ARGS` (torchrun launches this module)."""

import sys

from genalign.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
