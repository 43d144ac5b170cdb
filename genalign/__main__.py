"""`python -m genalign ...` == `genalign ...`."""

import sys

from genalign.cli import main

sys.exit(main())
