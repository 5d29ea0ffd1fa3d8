"""``python -m resolver_client "intent"``: the same as ``tooldns-resolve``."""

import sys

from .cli import main

sys.exit(main())
