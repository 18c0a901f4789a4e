"""``python -m bench [--smoke]``."""

from .run import main

main()
