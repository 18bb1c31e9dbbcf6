"""`python -m detector` is the `detector` command."""
import sys

from .cli import main

sys.exit(main())
