"""``python -m chatstream_local.bedrock``: the local Bedrock runtime endpoint on its own (see :mod:`.endpoint`)."""

from __future__ import annotations

from chatstream_local.bedrock.endpoint import main

raise SystemExit(main())
