"""``python -m casesignd`` is the ``casesignd`` command."""

import sys

from .cli import main

sys.exit(main())
