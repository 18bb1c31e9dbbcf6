"""`python -m detector` is the `detector` command."""
from .cli import console

console()
