"""``python -m bot``: the ``kioku`` command line."""

import sys

from bot.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
