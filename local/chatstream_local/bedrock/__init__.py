"""Amazon Bedrock Runtime, emulated: a local, deterministic model behind ``ConverseStream``.

- :mod:`.endpoint`: the HTTP endpoint (:class:`~.endpoint.LocalModelServer`) boto3's ``bedrock-runtime`` calls;
- :mod:`.converse`: the ``ConverseStream`` request, validated as Bedrock validates it;
- :mod:`.model`: the model's replies (:func:`~.model.plan_reply`, :func:`~.model.split_deltas`).

The reply's ``application/vnd.amazon.eventstream`` framing is :mod:`chatstream_local.eventstream` (Lambda's
``InvokeWithResponseStream`` uses it too).
"""
