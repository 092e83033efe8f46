"""chatstream's client tooling: talk to a relay, local or deployed.

- :mod:`.api`: :class:`~.api.ChatClient`, the relay's HTTP API over Server-Sent Events;
- :mod:`.auth`: :class:`~.auth.SigV4Auth`, SigV4 signing for an ``AWS_IAM`` Function URL (any ``httpx`` client);
- :mod:`.cli`: the terminal client, ``python -m chatstream_client.cli`` (``make chat``);
- :mod:`.smoke`: the check of a deployment, ``python -m chatstream_client.smoke`` (``make smoke``).
"""
