"""``python -m rtamt_apps``: the ``rtamt`` command line."""
import sys

from .cli import main

sys.exit(main())
