"""``python -m kiln.driver.tvmc``: the tvmc command line (main.py)."""

import sys

from .main import main

sys.exit(main())
