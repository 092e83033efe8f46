"""The relay's core: the HTTP API of HTTP_API.md on a streaming Function URL.

``http`` turns a payload-format-2.0 event into a :class:`~chatstream.relay.http.Request` and shapes
responses; ``validation`` checks ``POST /chat`` bodies and resume positions; ``sse`` frames
Server-Sent Events; ``follow`` tails one turn's token items in ChatTable; ``service`` declares the
routes and answers them. ``functions/relay/app.py`` is the thin Lambda entry point: it parses the event
into a ``Request``, has :class:`~chatstream.relay.service.RelayService` answer it, and logs from it.
"""
