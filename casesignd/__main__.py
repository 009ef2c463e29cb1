"""``python -m casesignd`` is the ``casesignd`` command."""

import sys

from casesignd.cli.commands import main

sys.exit(main())
