"""``python -m chaos`` is ``python -m chaos.run``."""

import sys

from chaos.run import main

sys.exit(main())
