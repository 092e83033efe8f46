"""The local Lambda: the service, its execution environments, and the endpoints that invoke them.

Laid out as LocalStack's Lambda provider is (``localstack/services/lambda_/invocation/``):

- :mod:`.service`: :class:`LocalLambda`, the service facade (functions, pools, ``invoke``/``invoke_stream``);
- :mod:`.function_spec`: a function's configuration (:class:`FunctionSpec`);
- :mod:`.template_functions`: each function of template.yaml made a :class:`FunctionSpec`;
- :mod:`.assignment`: the pool of one function's execution environments;
- :mod:`.execution_environment`: one environment, its process and its timers;
- :mod:`.executor_endpoint`: the Runtime API endpoint an environment's runtime talks to;
- :mod:`.runtime_executor`: how an environment's process is run (command, variables, process group);
- :mod:`.deployed_site`: the interpreter it runs on, which sees only the packages a deployed function has;
- :mod:`.invocation`: an invocation and its response (:class:`StreamHandle`, :class:`InvokeResult`);
- :mod:`.exceptions`: the service's own errors;
- :mod:`.log_pump`: an environment's output, line by line, given to the invocation it belongs to;
- :mod:`.invoke`: the Lambda API (``Invoke``, ``InvokeWithResponseStream``, ``GetFunction``);
- :mod:`.destinations`: Lambda's invocation records (an asynchronous invocation's, an event source mapping's) and
  their delivery to an on-failure destination;
- :mod:`.function_url`: the Function URL front end;
- :mod:`.cors`: its CORS, from the template's ``FunctionUrlConfig.Cors``.
"""
