"""The relay's core: the HTTP API of HTTP_API.md on a streaming Function URL.

``http`` turns a payload-format-2.0 event into a :class:`~chatstream.relay.http.Request`, shapes
responses and routes them; ``validation`` checks ``POST /chat`` bodies and resume positions; ``sse`` frames
Server-Sent Events; ``follow`` tails one turn's token items in ChatTable; ``identity`` names the caller under
the auth mode; ``exchange`` is one request being answered (ownership, beginning a turn, invoking the proxy,
cancelling, following), what every endpoint is written against; ``native`` declares the native API's routes and
``openai`` OpenAI's under ``/v1``; ``service`` composes the routes and answers a request.
``functions/relay/app.py`` is the thin Lambda entry point: it parses the event into a ``Request``, has
:class:`~chatstream.relay.service.RelayService` answer it, and logs from it.
"""
