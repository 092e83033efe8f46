"""Lambda's event source mappings, emulated: the pollers that read a stream or a queue and invoke a function.

- :mod:`.poller`: the steps every mapping's poller takes, in Lambda's order (:class:`~.poller.Poller`);
- :mod:`.kinesis`: the Kinesis mapping (:class:`~.kinesis.EventSourceMapping`) that feeds the consumer, one
  :class:`~.kinesis.ShardPoller` per shard;
- :mod:`.sqs`: the SQS mapping (:class:`~.sqs.SqsEventSource`, a poller) that feeds the turn reaper;
- :mod:`.invoker`: how a mapping invokes its function, and what it gets back.
"""
