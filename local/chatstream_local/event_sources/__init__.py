"""Lambda's event source mappings, emulated: the pollers that read a stream or a queue and invoke a function.

- :mod:`.kinesis`: the Kinesis mapping (:class:`~.kinesis.EventSourceMapping`) that feeds the consumer;
- :mod:`.sqs`: the SQS mapping (:class:`~.sqs.SqsEventSource`) that feeds the turn reaper;
- :mod:`.invoker`: how a mapping invokes its function, and what it gets back.
"""
