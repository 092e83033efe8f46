"""``python -m streaming_runtime``: serve invocations until the Runtime API goes away."""

from streaming_runtime.bootstrap import main

raise SystemExit(main())
