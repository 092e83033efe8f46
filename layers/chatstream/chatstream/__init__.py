"""chatstream's shared package: the token record, configuration, the ChatTable access layer
and the cores of the proxy, consumer and relay functions (shipped as ChatstreamLayer)."""
