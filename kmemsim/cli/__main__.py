"""`python -m kmemsim.cli ARGS` runs `kmemsim ARGS` (validate starts `kmemsim profile` so)."""
from . import main

main()
