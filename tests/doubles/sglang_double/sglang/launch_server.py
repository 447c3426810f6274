"""TEST DOUBLE of `python -m sglang.launch_server` (sglang==0.5.23): launches the process model.

Spawned children re-import this module as `__mp_main__`; like the real one it does nothing at
import time beyond imports, and starts the server only under `__main__`.
"""

import sys

from sglang._double.engine import main

if __name__ == "__main__":
    main(sys.argv[1:])
