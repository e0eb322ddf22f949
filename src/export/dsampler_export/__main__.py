# Lets `python -m dsampler_export ...` stand in for the console script (no install needed).

import sys

from .cli import main

sys.exit(main())
